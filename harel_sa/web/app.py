"""The web app (Starlette): the page, the confirmation of an action, and the action itself.

The app is given how to open the queue (read-only, or for a write), so it names no database
itself; every value reaches HTML through Jinja2's autoescape and a strict CSP (no script).
An error is shown with ``redact`` applied, so a database password never reaches the page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from harel_sa.web import actions
from harel_sa.web.guard import Guard, Secret, authorities
from harel_sa.web.view import Reader, group_page

HERE = Path(__file__).parent
#: The largest form accepted (an action's fields and a token).
MAX_FORM = 16 * 1024
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # (no-referrer makes a form's Origin "null")
    "Cache-Control": "no-store",
}
log = logging.getLogger("harel_sa.web")
Opener = Callable[[], Any]


def create_app(
    *,
    open_read: Opener,
    open_write: Opener,
    title: str,
    address: tuple[str, int],
    token: str | None = None,
    hosts: Iterable[str] = (),
    refresh: int = 5,
    redact: Callable[[str], str] = lambda text: text,
) -> Starlette:
    """The app over the queue ``open_read``/``open_write`` open (each call a transport that
    the app closes); ``title`` names the queue (credentials masked already). It answers to
    ``address`` (host, port) alone; writes are allowed when a ``token`` is given."""
    guard = Guard(authorities(*address), None if token is None else Secret(token))
    templates = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    templates.globals["link"] = lambda *pairs: (
        "/confirm?" + urlencode([(k, str(v)) for k, v in pairs if v is not None])
    )
    reader = Reader()
    style = (HERE / "templates" / "style.css").read_text()

    def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = templates.get_template(name).render(
            title=title, writes=guard.writes, refresh=0, **context
        )
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    def failed(exc: Exception) -> HTMLResponse:
        said = redact(" ".join(f"{type(exc).__name__}: {exc}".split()))
        log.error("harel-sa web: %s", said)
        return render("message.html", 500, heading="The queue could not be read", text=said)

    def refused(request: Request) -> Response | None:
        why = guard.refusal(request.method, request.headers)
        return None if why is None else render("message.html", 403, heading="Refused", text=why)

    def read(action: Callable[[Any], Any]) -> Any:
        q = open_read()
        try:
            return action(q)
        finally:
            q.close()

    async def page(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        try:
            snapshot = await run_in_threadpool(read, reader.read)
        except Exception as exc:
            return failed(exc)
        html = templates.get_template("page.html").render(
            title=title, writes=guard.writes, refresh=refresh, s=snapshot
        )
        return HTMLResponse(html, headers=HEADERS)

    async def group(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        group_id = request.query_params.get("id")
        if group_id is None:
            return render("message.html", 400, heading="Which group?", text="give ?id=GROUP")
        try:
            found = await run_in_threadpool(read, lambda q: group_page(q, group_id))
        except Exception as exc:
            return failed(exc)
        return HTMLResponse(
            templates.get_template("group.html").render(
                title=title, writes=guard.writes, refresh=refresh, g=found
            ),
            headers=HEADERS,
        )

    async def css(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        return Response(style, media_type="text/css", headers=HEADERS)

    async def confirm(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        if not guard.writes:
            return render("message.html", 403, heading="Read-only", text=guard.write_refusal(""))
        try:
            wanted = actions.parse(dict(request.query_params))
        except actions.ActionError as exc:
            return render("message.html", 400, heading="Not an action", text=str(exc))
        try:
            found = await run_in_threadpool(read, lambda q: actions.affected(q, wanted))
        except Exception as exc:
            return failed(exc)
        if found is None:
            text = f"no dead message with seq {wanted.seq}: nothing to do"
            return render("message.html", 404, heading="Not found", text=text)
        return render("confirm.html", r=wanted, affected=found)

    async def act(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        if request.headers.get("content-type", "").split(";")[0].strip() != (
            "application/x-www-form-urlencoded"
        ):
            return render("message.html", 415, heading="Refused", text="not a form")
        body = await request.body()
        if len(body) > MAX_FORM:
            return render("message.html", 413, heading="Refused", text="form too large")
        form: dict[str, str] = {}
        for key, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
            form.setdefault(key, value)
        why = guard.write_refusal(form.pop("token", None))
        if why is not None:
            return render("message.html", 403, heading="Refused", text=why)
        try:
            wanted = actions.parse(form)
        except actions.ActionError as exc:
            return render("message.html", 400, heading="Not an action", text=str(exc))
        try:
            done = await run_in_threadpool(_perform, open_write, wanted)
        except Exception as exc:
            return failed(exc)
        if done is None:
            text = f"no dead message with seq {wanted.seq}: nothing changed"
            return render("message.html", 404, heading="Not found", text=text)
        log.info("harel-sa web: %s", done)
        return render("message.html", heading="Done", text=done)

    return Starlette(
        routes=[
            Route("/", page, methods=["GET"]),
            Route("/group", group, methods=["GET"]),
            Route("/style.css", css, methods=["GET"]),
            Route("/confirm", confirm, methods=["GET"]),
            Route("/action", act, methods=["POST"]),
        ]
    )


def _perform(open_write: Opener, wanted: actions.Request) -> str | None:
    """Do ``wanted``; what was done in words, or ``None`` for a dead letter not there."""
    q = open_write()
    try:
        if actions.missing(q, wanted):
            return None
        count = wanted.action.perform(q, wanted)
        if wanted.action.flow:
            whom = wanted.what() + ("" if wanted.group is None else f" {wanted.group}")
            return f"{whom}: {wanted.action.done(count)}"
        return wanted.action.done(count) + (
            "" if wanted.group is None else f" of group {wanted.group}"
        )
    finally:
        q.close()
