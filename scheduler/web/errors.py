"""The page's own answers for what went wrong: 400, 403, 404, 405, 409, 500 and 503 as a
page of the site, with the reason as a sentence and a way back, rather than Flask's bare
pages. The endpoints Prometheus and a load balancer ask keep plain text."""

from __future__ import annotations

from flask import Flask, Response, render_template, request, url_for
from werkzeug.exceptions import HTTPException, InternalServerError

TITLES = {
    400: "Not a request this page makes",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed here",
    409: "Refused",
    500: "Something went wrong on cronchain's side",
    503: "The database is not answering",
}
PLAIN = ("/metrics", "/healthz", "/livez", "/static/")


def register(app: Flask) -> None:
    for code in TITLES:
        app.register_error_handler(code, answer)


def answer(error: HTTPException) -> Response:
    code = error.code or 500
    if isinstance(error, InternalServerError):  # an exception the page did not expect
        sentence = "The error is in cronchain serve's log. Reload the page to try again."
    else:
        sentence = error.description or ""
    headers = {k: v for k, v in error.get_headers() if k == "Allow"}  # a 405 says what is
    if request.path.startswith(PLAIN):
        return Response(f"{sentence}\n", code, headers, mimetype="text/plain")
    back = None
    if request.endpoint == "control" and request.view_args:  # a refused control: its job
        back = url_for("job", project=request.view_args["project"], name=request.view_args["name"])
    page = render_template(
        "error.html", code=code, title=TITLES[code], sentence=sentence, back=back
    )
    return Response(page, code, headers, mimetype="text/html")
