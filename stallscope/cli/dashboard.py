"""`stallscope dashboard`: serve the Dash app over a store, a repro run directory or Prometheus.

Binds 127.0.0.1 by default; any other address needs a token (`--auth-token` or
$STALLSCOPE_AUTH_TOKEN) and answers 401 without it. Debug mode is always off.
"""

from __future__ import annotations

import sys


def add_arguments(p) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--db", metavar="FILE", help="an embedded store written by `stallscope collect`")
    src.add_argument("--run", metavar="DIR", help="a `stallscope repro` run directory (or one arm of it)")
    src.add_argument("--prometheus", metavar="URL", help="a Prometheus/Thanos/Mimir base URL")
    p.add_argument("--selector", default="", help='label matchers for --prometheus, e.g. model_name="m"')
    p.add_argument("--since", default="1h", help="how far back to read from --prometheus (default 1h)")
    p.add_argument("--fleet", action="store_true",
                   help="with --prometheus: triage every replica on the Fleet page and load raw series only "
                        "for the replica clicked there (docs/fleet.md)")
    from stallscope.cli.analyze_metrics import add_config_arguments

    add_config_arguments(p)   # for a store or Prometheus; a run directory's server.json wins
    p.add_argument("--trace", metavar="FILE", help="steps for the Trace page: an nsys SQLite export or a step-trace JSONL")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--auth-token", default=None, help="token required on non-loopback binds (or $STALLSCOPE_AUTH_TOKEN)")
    p.add_argument("--refresh", default="5s", help="live-mode refresh interval (default 5s)")
    p.add_argument("--no-live", action="store_true", help="load once; do not refresh")


def build_source(args):
    """The DataSource the flags name (also used by `stallscope demo`)."""
    from stallscope.core.config import parse_duration
    from stallscope.dashboards.data import DataSource

    live = not getattr(args, "no_live", False)
    if getattr(args, "db", None):
        source = DataSource.from_db(args.db, live=live)
    elif getattr(args, "run", None):
        source = DataSource.from_run(args.run)
    else:
        source = DataSource.from_prometheus(args.prometheus, selector=args.selector,
                                            since_s=parse_duration(args.since), live=live,
                                            fleet=bool(getattr(args, "fleet", False)))
    if getattr(args, "trace", None):
        source = source.with_trace(args.trace)
    elif getattr(args, "server_log", None) and getattr(args, "run", None) is None:
        from stallscope.collectors.vllm_log import read_iterations

        log = args.server_log      # its iteration-details lines, read again at every reload (the log grows)
        source = source.with_steps(lambda: read_iterations(log))
    from stallscope.cli.analyze_metrics import stated_chunking

    stated = stated_chunking(args)
    return source.with_chunking(stated) if stated is not None else source


def serve(app, host: str, port: int, *, any_port_if_busy: bool = False) -> int:
    """Serve `app` until interrupted; print the URL first (stdout, flushed)."""
    from werkzeug.serving import make_server

    from stallscope.core.errors import InputError

    try:
        server = make_server(host, port, app.server, threaded=True)
    except OSError as exc:
        if not any_port_if_busy:
            raise InputError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None
        server = make_server(host, 0, app.server, threaded=True)
    shown = f"[{host}]" if ":" in host else host
    print(f"stallscope dashboard: http://{shown}:{server.server_port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stallscope dashboard: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


def run(args) -> int:
    from stallscope.core.config import parse_duration
    from stallscope.dashboards.app import create_app
    from stallscope.dashboards.auth import resolve_token
    from stallscope.core.errors import InputError

    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be 0-65535, got {args.port}")
    if getattr(args, "fleet", False) and not args.prometheus:
        raise InputError("--fleet needs --prometheus URL")
    token = resolve_token(args.host, args.auth_token)
    source = build_source(args)
    source.frames()  # fail on a bad source now, with one line, not on the first page view
    app = create_app(source, auth_token=token, live_interval_s=parse_duration(args.refresh))
    return serve(app, args.host, args.port)
