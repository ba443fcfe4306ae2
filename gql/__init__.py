"""The run-log API: a GraphQL service over an event run's diagnostic log."""
