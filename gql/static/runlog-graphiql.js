// The run-log API's GraphiQL page (served by gql/graphiql.py, with React,
// GraphiQL 3 and its explorer plugin from gql/static/graphiql/, never a CDN).
// It is Strawberry's own GraphiQL page moved out of an inline script, so that
// the page's Content-Security-Policy can allow scripts from 'self' only, and
// changed in three places: it opens on the example tabs the server hands it,
// Strawberry's welcome text no longer overwrites the first of them, and opening
// the page again reopens the tab that was open instead of adding one.
"use strict";

(function () {
  // One tab per file in gql/operations/, with variables that work on the demo.
  const RUNLOG_TABS = JSON.parse(
    document.getElementById("runlog-example-tabs").textContent,
  );
  // The tabs GraphiQL stored in this browser for this address, if any.
  // GraphiQL 3 opens on defaultTabs only when it has none, and then leaves the
  // first tab's variables out of the editor.
  const STORED_TABS = (() => {
    try {
      return JSON.parse(window.localStorage.getItem("graphiql:tabState"));
    } catch {
      return null;
    }
  })();
  const RUNLOG_FIRST_VISIT = STORED_TABS === null;
  // GraphiQL 3 reopens the stored tab whose query, variables and headers are
  // the ones it is given, and adds a new tab when none is; given nothing, it
  // added a tab on every reload. So a reload is given the tab that was open,
  // and only a shared link (?q=...) to a query no tab holds opens a new one.
  const OPEN_TAB = (STORED_TABS?.tabs ?? [])[STORED_TABS?.activeTabIndex] ?? {};

  // URL parameters, for sharing a query: ?q=...&variables=...
  const parameters = {};
  for (const entry of window.location.search.slice(1).split("&")) {
    const eq = entry.indexOf("=");
    if (eq >= 0) {
      parameters[decodeURIComponent(entry.slice(0, eq))] = decodeURIComponent(
        entry.slice(eq + 1),
      );
    }
  }

  function updateURL(data) {
    Object.assign(parameters, data);
    const search =
      "?" +
      Object.keys(parameters)
        .filter((key) => Boolean(parameters[key]))
        .map((key) => encodeURIComponent(key) + "=" + encodeURIComponent(parameters[key]))
        .join("&");
    history.replaceState(null, null, search);
  }

  // Queries and mutations go to this page's own URL over HTTP; subscriptions
  // to the same URL over a websocket (graphql-transport-ws, with the `graphql-ws`
  // client inside GraphiQL's build), ws: or wss: as the page was loaded. The
  // headers typed in GraphiQL's headers editor go with both: as HTTP headers,
  // and as the websocket's connection_init payload, where the service reads
  // `Authorization` (a browser cannot set headers on a websocket).
  const fetchURL = window.location.origin + window.location.pathname;
  const subscriptionURL = new URL(fetchURL);
  subscriptionURL.protocol = window.location.protocol === "https:" ? "wss:" : "ws:";

  const sendByKind = GraphiQL.createFetcher({
    url: fetchURL,
    subscriptionUrl: subscriptionURL.toString(),
  });
  // GraphiQL's fetcher picks the websocket when the document it is handed is
  // a subscription, and GraphiQL hands it the editor's text, and the operation
  // name, as parsed 100 ms after the last change. Paste a subscription and run
  // it at once, and both were of the text before: the subscription went over
  // HTTP, where the service refuses it, or went with the name of the tab open
  // before ("Unknown operation named ..."). So the document and the operation
  // name are taken from the text being sent.
  function fetcher(params, options) {
    let documentAST = options?.documentAST;
    if (documentAST?.loc?.source.body !== params.query) {
      try {
        documentAST = GraphiQL.GraphQL.parse(params.query);
      } catch {
        // Not a document: sent as it is, for the service to say what is wrong.
        return sendByKind(params, options);
      }
    }
    const operationName = operationToRun(documentAST, params.operationName);
    return sendByKind({ ...params, operationName }, { ...options, documentAST, operationName });
  }

  // The name GraphiQL chose when the document holds it; else the document's
  // only operation; else GraphiQL's choice, for the service to refuse by name.
  function operationToRun(documentAST, chosen) {
    const operations = documentAST.definitions.filter(
      (definition) => definition.kind === "OperationDefinition",
    );
    if (chosen && operations.some((operation) => operation.name?.value === chosen)) return chosen;
    if (operations.length === 1) return operations[0].name?.value ?? undefined;
    return chosen ?? undefined;
  }
  // For tests and the curious: where this page sends its subscriptions.
  window.RUNLOG_GRAPHIQL = { url: fetchURL, subscriptionUrl: subscriptionURL.toString(), fetcher };

  function GraphiQLWithExplorer() {
    // Strawberry opens on its welcome text unless the URL carries ?q=; here
    // the first example tab is the welcome, and ?q= still opens a shared query.
    const [query, setQuery] = React.useState(parameters.q ?? OPEN_TAB.query);
    // The URL carries the query and variables as last edited (updateURL);
    // a query alone is the open tab's when it is that tab's text.
    const sameAsOpenTab = !parameters.q || parameters.q === OPEN_TAB.query;
    const [variables, setVariables] = React.useState(
      parameters.variables ??
        (RUNLOG_FIRST_VISIT && !parameters.q
          ? RUNLOG_TABS[0].variables
          : sameAsOpenTab
            ? OPEN_TAB.variables
            : undefined),
    );
    const [headers, setHeaders] = React.useState(parameters.headers ?? OPEN_TAB.headers);

    function onEditQuery(newQuery) {
      setQuery(newQuery);
      updateURL({ q: newQuery });
    }

    function onEditVariables(newVariables) {
      setVariables(newVariables);
      updateURL({ variables: newVariables });
    }

    function onEditHeaders(newHeaders) {
      setHeaders(newHeaders);
    }

    const explorerPlugin = GraphiQLPluginExplorer.explorerPlugin();

    return React.createElement(GraphiQL, {
      defaultTabs: RUNLOG_TABS,
      fetcher: fetcher,
      defaultEditorToolsVisibility: true,
      plugins: [explorerPlugin],
      query: query,
      variables: variables,
      headers: headers,
      onEditQuery: onEditQuery,
      onEditVariables: onEditVariables,
      onEditHeaders: onEditHeaders,
      inputValueDeprecation: true,
      isHeadersEditorEnabled: true,
      shouldPersistHeaders: true,
    });
  }

  const root = ReactDOM.createRoot(document.getElementById("graphiql"));
  root.render(React.createElement(GraphiQLWithExplorer));
})();
