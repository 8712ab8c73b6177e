"""The token gate for non-loopback binds: every request must carry the token, or gets 401.

A browser passes it once as `?token=T` and is redirected to the same page without it, holding an
HttpOnly cookie instead; scripts send `Authorization: Bearer T`. Comparison is constant-time.
"""

from __future__ import annotations

import hmac
import ipaddress
import os

from urllib.parse import urlencode

from flask import Flask, Response, redirect, request

from stallscope.core.errors import InputError

COOKIE = "stallscope_token"
ENV = "STALLSCOPE_AUTH_TOKEN"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_token(host: str, flag: str | None) -> str | None:
    """The token to enforce: `--auth-token`, else $STALLSCOPE_AUTH_TOKEN; required off loopback.

    >>> resolve_token("127.0.0.1", None) is None
    True
    """
    token = flag or os.environ.get(ENV) or None
    if token is None and not is_loopback(host):
        raise InputError(f"--host {host} is not a loopback address: pass --auth-token T or set {ENV}")
    if token is not None and len(token) < 8:
        raise InputError("--auth-token must be at least 8 characters")
    return token


def _presented() -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header[len("Bearer "):]
    return request.args.get("token") or request.cookies.get(COOKIE)


def protect(server: Flask, token: str) -> None:
    """Answer 401 to every request on `server` that lacks `token`."""
    expected = token.encode()

    @server.before_request
    def _check():
        given = _presented()
        if given is None or not hmac.compare_digest(given.encode(), expected):
            return Response("401 Unauthorized: stallscope dashboard token required\n", status=401,
                            mimetype="text/plain", headers={"WWW-Authenticate": 'Bearer realm="stallscope"'})
        if request.args.get("token"):  # trade the URL token for a cookie, and drop it from the address bar
            rest = urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "token"])
            response = redirect(request.path + (f"?{rest}" if rest else ""), code=302)
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
            return response
        return None
