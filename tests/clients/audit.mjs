// The GraphQL over HTTP specification's audit (the graphql-http package's
// serverAudits) against the server at argv[2]; prints one JSON object per
// line: {id, name, status, reason?}. tests/test_js_clients.py judges them.
import { serverAudits } from "graphql-http";

const url = process.argv[2];
for (const audit of serverAudits({ url })) {
  const result = await audit.fn();
  const line = { id: result.id, name: result.name, status: result.status };
  if (result.status !== "ok") line.reason = result.reason;
  console.log(JSON.stringify(line));
}
