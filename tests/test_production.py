"""The production switches: GraphiQL and introspection off, and what still works with them off."""

from __future__ import annotations

from collections.abc import Callable

from .conftest import Api
from .test_limits import every_detail_fragment


def test_with_graphiql_off_a_browser_gets_404_and_the_api_still_answers(make_api: Callable[..., Api]) -> None:
    api = make_api(graphiql=False)
    response = api.client.get("/graphql", headers={"Accept": "text/html"})
    assert response.status_code == 404
    assert "graphiql" not in response.text.lower()
    assert api.data("{ __typename }") == {"__typename": "Query"}


def test_with_introspection_off_the_schema_is_hidden_but_typename_still_works(
    make_api: Callable[..., Api],
) -> None:
    api = make_api(introspection=False, graphiql=False)
    for query in ("{ __schema { types { name } } }", '{ __type(name: "RunLogLine") { fields { name } } }'):
        body = api.post(query)
        assert body.get("data") is None
        assert "introspection has been disabled" in body["errors"][0]["message"]
    # The frontend tells detail types apart by __typename: that is not introspection.
    assert api.write(1, "note", {"text": "still readable"})
    page = api.data(every_detail_fragment(), {"runId": "1"})["runLog"]
    assert page["nodes"][0]["detail"]["__typename"] == "NoteDetail"
