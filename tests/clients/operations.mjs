// The shipped operations (gql/operations), each as a whole document with the
// fragments it spreads: what a frontend's build (GraphQL Code Generator)
// sends.
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Kind, parse, visit } from "graphql";

const folder = fileURLToPath(new URL("../../gql/operations/", import.meta.url));
const definitions = readdirSync(folder)
  .filter((name) => name.endsWith(".graphql"))
  .flatMap((name) => parse(readFileSync(folder + name, "utf8")).definitions);
const fragments = new Map(
  definitions.filter((d) => d.kind === Kind.FRAGMENT_DEFINITION).map((d) => [d.name.value, d]),
);

/** The operation `name` with every fragment it spreads, as a DocumentNode. */
export function operation(name) {
  const found = definitions.find((d) => d.kind === Kind.OPERATION_DEFINITION && d.name?.value === name);
  if (!found) throw new Error(`no operation ${name} in gql/operations`);
  const used = new Map();
  const pending = [found];
  while (pending.length) {
    visit(pending.pop(), {
      FragmentSpread(node) {
        const name = node.name.value;
        if (!used.has(name)) {
          used.set(name, fragments.get(name));
          pending.push(fragments.get(name));
        }
      },
    });
  }
  return { kind: Kind.DOCUMENT, definitions: [found, ...used.values()] };
}

/** Print one JSON report on stdout and end: the Python test reads it. */
export function report(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}
