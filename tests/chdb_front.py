"""A current ClickHouse engine (chdb's, in this process) behind the part of
ClickHouse's HTTP interface that profd's sink and `profctl fleet` use, for
the end-to-end tests (tests/src/clickhouse.rs, `Chdb`).

    python3 tests/chdb_front.py DIR

keeps its data in DIR (a chdb session there), listens on a free loopback
port and prints that port on its first line of output.

What it takes, as clickhouse-server does:
- `GET /ping`: `Ok.`
- `GET` or `POST /`: the statement is the `query` parameter, then (a line
  feed between) the request body, gzip'd when `Content-Encoding: gzip`
  says so. It runs in the database the `database` parameter names
  (`default` otherwise). The answer is in the statement's `FORMAT`,
  `TabSeparated` when it names none.
- `readonly=1` or `2`: only statements that read (SELECT, WITH, SHOW,
  DESCRIBE, EXISTS, EXPLAIN) run; others fail with READONLY.
- `X-ClickHouse-User` and `X-ClickHouse-Key`: the only user is `default`,
  without a password; any other fails with AUTHENTICATION_FAILED.
- A failed statement answers `Code: N. DB::Exception: ...` with the HTTP
  status the server gives that code (the current server's
  exceptionCodeToHTTPStatus) and the header `X-ClickHouse-Exception-Code`.
- `insert_distributed_sync`: set in the session for the statement.
Any other URL parameter (a setting) is refused with 400, naming it: the
front would not apply it.

Statements run one at a time (the engine is one per process).
"""

import gzip
import http.server
import re
import sys
import threading
import urllib.parse

from chdb import session

# The HTTP status of an exception, by the name of its code (ClickHouse's
# src/Server/HTTP/exceptionCodeToHTTPStatus.cpp); any other code is 500.
STATUS_OF = {
    401: ["REQUIRED_PASSWORD"],
    403: [
        "UNKNOWN_USER",
        "WRONG_PASSWORD",
        "AUTHENTICATION_FAILED",
        "SET_NON_GRANTED_ROLE",
        "ACCESS_DENIED",
    ],
    400: [
        "BAD_ARGUMENTS",
        "CANNOT_COMPILE_REGEXP",
        "CANNOT_PARSE_TEXT",
        "CANNOT_PARSE_ESCAPE_SEQUENCE",
        "CANNOT_PARSE_QUOTED_STRING",
        "CANNOT_PARSE_DATE",
        "CANNOT_PARSE_DATETIME",
        "CANNOT_PARSE_NUMBER",
        "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
        "CANNOT_PARSE_IPV4",
        "CANNOT_PARSE_IPV6",
        "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
        "CANNOT_PARSE_UUID",
        "DUPLICATE_COLUMN",
        "ILLEGAL_COLUMN",
        "UNKNOWN_ELEMENT_IN_AST",
        "UNKNOWN_TYPE_OF_AST_NODE",
        "THERE_IS_NO_COLUMN",
        "TOO_DEEP_AST",
        "TOO_BIG_AST",
        "UNEXPECTED_AST_STRUCTURE",
        "SYNTAX_ERROR",
        "INCORRECT_DATA",
        "TYPE_MISMATCH",
        "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    ],
    404: [
        "UNKNOWN_TABLE",
        "UNKNOWN_FUNCTION",
        "UNKNOWN_IDENTIFIER",
        "UNKNOWN_TYPE",
        "UNKNOWN_STORAGE",
        "UNKNOWN_DATABASE",
        "UNKNOWN_SETTING",
        "UNKNOWN_DIRECTION_OF_SORTING",
        "UNKNOWN_AGGREGATE_FUNCTION",
        "UNKNOWN_FORMAT",
        "UNKNOWN_DATABASE_ENGINE",
        "UNKNOWN_TYPE_OF_QUERY",
        "UNKNOWN_ROLE",
    ],
    413: ["QUERY_IS_TOO_LARGE"],
    501: ["NOT_IMPLEMENTED"],
    503: ["SOCKET_TIMEOUT", "CANNOT_OPEN_FILE", "CANNOT_SCHEDULE_TASK"],
    411: ["HTTP_LENGTH_REQUIRED"],
    408: ["TIMEOUT_EXCEEDED"],
    415: ["UNSUPPORTED_MEDIA_TYPE"],
}

# The settings the front applies (integers).
SETTINGS = ("insert_distributed_sync",)

READS = ("SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN")


class Engine:
    """The chdb session, one statement at a time."""

    def __init__(self, path):
        self.session = session.Session(path)
        self.lock = threading.Lock()
        names = self.session.query(
            "SELECT number, errorCodeToName(number) FROM numbers(2000) "
            "WHERE errorCodeToName(number) != ''",
            "TabSeparated",
        )
        self.code = {}
        for line in names.bytes().decode().splitlines():
            number, name = line.split("\t")
            self.code[name] = int(number)
        self.status = {
            self.code[name]: status
            for status, listed in STATUS_OF.items()
            for name in listed
            if name in self.code
        }

    def run(self, sql, database, settings):
        """The statement's answer (bytes), or raises chdb's error; the
        session's settings are `settings` while it runs."""
        with self.lock:
            self.session.query(f"USE `{database}`")
            before = {}
            for name, value in settings.items():
                now = self.session.query(
                    f"SELECT value FROM system.settings WHERE name = '{name}'", "TabSeparated"
                )
                before[name] = now.bytes().decode().strip()
                self.session.query(f"SET {name} = {int(value)}")
            try:
                return self.session.query(sql, "TabSeparated").bytes()
            finally:
                for name, value in before.items():
                    self.session.query(f"SET {name} = {int(value)}")

    def failure(self, name, text):
        """(status, code, body) of an exception of code `name`."""
        code = self.code[name]
        return self.status.get(code, 500), code, f"Code: {code}. DB::Exception: {text}"


class Handler(http.server.BaseHTTPRequestHandler):
    engine = None

    def log_message(self, format, *args):
        sys.stderr.write("chdb front: " + (format % args) + "\n")

    def answer(self, status, body, code=None):
        self.send_response(status)
        if code is not None:
            self.send_header("X-ClickHouse-Exception-Code", str(code))
        self.send_header("Content-Type", "text/plain; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def fail(self, status, code, text):
        self.answer(status, (text.rstrip("\n") + "\n").encode(), code)

    def do_GET(self):
        self.serve(b"")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        self.serve(body)

    def serve(self, body):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/ping":
            return self.answer(200, b"Ok.\n")
        if url.path != "/":
            return self.fail(404, None, f"no handler for {url.path}")
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        engine = self.engine
        user = self.headers.get("X-ClickHouse-User", "default")
        key = self.headers.get("X-ClickHouse-Key", "")
        if user != "default" or key != "":
            return self.fail(*engine.failure("AUTHENTICATION_FAILED", f"{user}: Authentication failed"))
        database = params.pop("database", "default")
        readonly = params.pop("readonly", "0")
        query = params.pop("query", "")
        settings = {k: params.pop(k) for k in SETTINGS if k in params}
        if params:
            return self.fail(400, None, f"the chdb front does not apply the settings {sorted(params)}")
        sql = query + ("\n" if query and body else "") + body.decode()
        first = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if readonly in ("1", "2") and first.lstrip("(") not in READS:
            return self.fail(*engine.failure("READONLY", "Cannot execute query in readonly mode"))
        try:
            out = engine.run(sql, database, settings)
        except Exception as e:  # chdb's error: "Code: N. DB::Exception: ..."
            text = str(e)
            m = re.match(r"Code: (\d+)\.", text)
            code = int(m.group(1)) if m else 1001
            return self.fail(engine.status.get(code, 500), code, text)
        self.answer(200, out)


def main():
    Handler.engine = Engine(sys.argv[1])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
