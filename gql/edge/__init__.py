"""The HTTP edge: the app, its routes and middlewares, the pages, and how uvicorn serves them."""
