"""The `stallscope` command: one subcommand per capability, each in its own module.

Each command module exposes `add_arguments(parser)` and `run(args) -> int` and keeps heavy
imports inside `run`, so `stallscope --help` stays fast. User errors are `ToolkitError`s and
print as one line, `stallscope: error: ...`, with exit code 2 (see `stallscope.core.errors`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from stallscope import __version__
from stallscope.core.errors import ToolkitError

# (subcommand, module, one-line help)
COMMANDS = [
    ("generate", "stallscope.cli.generate", "generate text with the reference engine"),
    ("refserver", "stallscope.cli.refserver", "run the OpenAI-compatible reference server"),
    ("loadgen", "stallscope.cli.loadgen", "drive a server with steady streams plus long prompts"),
    ("repro", "stallscope.cli.repro", "reproduce decode starvation or KV pressure in two arms"),
    ("collect", "stallscope.cli.collect", "scrape vLLM/DCGM/NVML into the embedded store"),
    ("analyze", "stallscope.cli.analyze", "diagnose a run, a store, Prometheus or an nsys export"),
    ("roofline", "stallscope.cli.roofline", "roofline figures for a GPU and a model"),
    ("rules", "stallscope.cli.rules", "render or check the Prometheus alert rules"),
    ("dashboard", "stallscope.cli.dashboard", "serve the Dash web app"),
    ("grafana", "stallscope.cli.grafana", "write the Grafana dashboard generated from the thresholds"),
    ("whatif", "stallscope.cli.whatif", "simulate chunk budgets and recommend one"),
    ("demo", "stallscope.cli.demo", "reproduce, collect, analyze and show, in one command"),
]


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        sys.stderr.write(f"stallscope: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="stallscope", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"stallscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>", parser_class=_OneLineParser)
    for name, module_name, help_text in COMMANDS:
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    debug = os.environ.get("STALLSCOPE_DEBUG") == "1"
    try:
        return int(args._run(args) or 0)
    except ToolkitError as exc:
        if debug:
            raise
        sys.stderr.write(f"stallscope: error: {exc}\n")
        return exc.exit_code
    except ModuleNotFoundError as exc:   # an install problem, not a bug: say what to install
        if debug:
            raise
        sys.stderr.write(f"stallscope: error: Python module `{exc.name}` is not installed; "
                         "reinstall stallscope with its dependencies (`pip install -e .` in the checkout)\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("stallscope: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: one line, exit 3; STALLSCOPE_DEBUG=1 shows the traceback
        if debug:
            raise
        sys.stderr.write(f"stallscope: internal error: {type(exc).__name__}: {exc} "
                         "(rerun with STALLSCOPE_DEBUG=1 for the traceback)\n")
        return 3

