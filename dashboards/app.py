"""Assemble the Dash app: the pages in `pages/`, one data source, a live-refresh timer, the token check.

Pages hold their own layout and callbacks and read only `data.current()`; this module wires them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import dash
from dash import Dash, dcc, html

from stallscope.dashboards import auth, data
from stallscope.dashboards import pages as _pages_pkg

PAGES_FOLDER = Path(_pages_pkg.__file__).resolve().parent  # the package is mapped from dashboards/pages


def create_app(source: data.DataSource, *, auth_token: str | None = None, live_interval_s: float = 5) -> Dash:
    """A ready Dash app over `source`; with `auth_token`, every request must carry it (else 401)."""
    data.use(source)
    app = Dash(__name__, use_pages=True, pages_folder=str(PAGES_FOLDER), title="stallscope",
               update_title=None, serve_locally=True)
    nav = [dcc.Link(page["name"], href=page["relative_path"], className="nav-link", id=f"nav-{page['module'].rsplit('.', 1)[-1]}")
           for page in dash.page_registry.values()]
    app.layout = html.Div([
        html.Header([html.B("stallscope"), html.Span(source.name, id="app-source", className="source"), *nav],
                    className="app-header"),
        dcc.Interval(id="app-live", interval=int(live_interval_s * 1000), disabled=not source.live),
        dash.page_container,
    ])
    if auth_token:
        auth.protect(app.server, auth_token)
    app._setup_server()  # bind the pages' callbacks to this app now, not at its first request
    return app


def page_module(name: str):
    """The page module Dash loaded for `name` (e.g. "overview"), for calling its callbacks in tests."""
    for page in dash.page_registry.values():
        if page["module"].rsplit(".", 1)[-1] == name:
            return sys.modules[page["module"]]
    raise KeyError(f"no dashboard page {name!r}")
