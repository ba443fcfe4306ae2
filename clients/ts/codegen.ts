// GraphQL Code Generator: TypeScript types for the schema and for each
// operation in gql/operations (the same files GraphiQL opens on and the
// Python client is built from), and the union's members for Apollo Client's
// cache. `npm run generate` writes src/generated/; clients/check.sh sets
// RUNLOG_CODEGEN_DIR to generate into a scratch folder and compare it with
// the committed one.
import type { CodegenConfig } from "@graphql-codegen/cli";

const out = process.env.RUNLOG_CODEGEN_DIR ?? "src/generated";

const config: CodegenConfig = {
  schema: "../../schema.graphql",
  documents: "../../gql/operations/*.graphql",
  generates: {
    // `possibleTypes` for Apollo Client's InMemoryCache: which detail types
    // the `RunLogDetail` union holds. Without it the cache cannot match a
    // fragment on a union member, warns for each, and may drop the data.
    // JSON, so that a frontend and a Node script read the same file.
    [`${out}/possible-types.json`]: {
      plugins: ["fragment-matcher"],
      config: { apolloClientVersion: 3 },
    },
    // The client preset's typed documents, each with its sha256 hash
    // (`__meta__.hash`), and persisted-documents.json: hash to text, the
    // manifest the service knows the shipped operations by
    // (RUNLOG_TRUSTED_DOCUMENTS; `npm run generate` copies it to
    // gql/operations/persisted-documents.json). A client sends
    // {"documentId": hash, "variables": ...} in place of the text.
    [`${out}/persisted/`]: {
      preset: "client",
      presetConfig: { persistedDocuments: { hashAlgorithm: "sha256" }, fragmentMasking: false },
      config: {
        scalars: { DateTime: "string", JSON: "unknown", ID: "string" },
        enumsAsTypes: true,
        useTypeImports: true,
      },
    },
    [`${out}/graphql.ts`]: {
      plugins: ["typescript-operations", "typed-document-node"],
      config: {
        scalars: {
          // ISO 8601 text in UTC, to the millisecond ("2026-11-30T05:40:00.123000+00:00").
          DateTime: "string",
          // Any JSON value, as the writer sent it.
          JSON: "unknown",
          ID: "string",
        },
        // String unions rather than TS enums: "RUN_STATUS" rather than
        // RunLogKind.RunStatus, nothing emitted at run time.
        enumsAsTypes: true,
        useTypeImports: true,
        // Every field the schema may leave out is `T | null`, never optional:
        // the server always sends selected fields.
        avoidOptionals: { field: true, inputValue: false, object: true, defaultValue: false },
      },
    },
  },
  hooks: {},
};

export default config;
