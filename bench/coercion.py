"""What a plan's coercion costs a request, laid out once or through graphql-core's functions.

    python -m bench.coercion

For each shipped query and mutation whose coercion is laid out
(gql/engine/coercion.py), the microseconds `Coercion.coerce` takes on the
bench's variables, against `get_variable_values` and `get_argument_values`
on the same operation (what the plan would call otherwise), in timeit
rounds (the best of three, the median of seven). The ratio is what the laid-out steps buy.
"""

from __future__ import annotations

import functools
import statistics
import timeit
from collections.abc import Callable
from typing import Any

from graphql import OperationDefinitionNode, parse

from bench.operations import shipped
from gql.compat.strawberry import graphql_schema
from gql.engine.coercion import Coercion
from gql.schema import build_schema

# What the bench sends (bench/run.py), as the shipped operations name them.
VARIABLES: dict[str, Any] = {"runId": "38", "limit": 50, "before": "c", "text": "a note", "actor": "bench"}


def _timings(call: Callable[[], object], rounds: int = 7, number: int = 2000) -> list[float]:
    return [min(timeit.repeat(call, number=number, repeat=3)) / number for _ in range(rounds)]


def main() -> int:
    schema = graphql_schema(build_schema())
    print(f"{'operation':16} {'laid out us':>12} {'general us':>11} {'ratio':>6}")
    for operation in shipped():
        if operation.kind == "subscription":
            continue
        (definition,) = [
            d for d in parse(operation.text).definitions if isinstance(d, OperationDefinitionNode)
        ]
        root = schema.get_root_type(definition.operation)
        if root is None:
            continue
        fields = [(root.fields[node.name.value], node) for node in definition.selection_set.selections]  # type: ignore[union-attr]
        coercion = Coercion(schema, definition, fields)  # type: ignore[arg-type]
        if coercion.steps is None:
            continue
        names = {v.variable.name.value for v in definition.variable_definitions or ()}
        inputs = {k: v for k, v in VARIABLES.items() if k in names}
        coerced = coercion.coerce(inputs)
        assert coerced is not None and coerced == coercion._coerce_in_general(inputs), operation.name
        laid_out = _timings(functools.partial(coercion.coerce, inputs))
        general = _timings(functools.partial(coercion._coerce_in_general, inputs))
        a, b = statistics.median(laid_out) * 1e6, statistics.median(general) * 1e6
        print(f"{operation.name:16} {a:12.2f} {b:11.2f} {b / a:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
