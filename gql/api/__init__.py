"""The GraphQL API: the schema, its types and resolvers, what a request may ask, and how it is executed."""
