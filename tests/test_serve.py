"""The `open` server's safety (issue 8.4), with real HTTP requests on loopback.

Each test starts a real server on 127.0.0.1 (a free port), talks to it with raw
``http.client`` requests (so Host, Origin and the request target are exactly what a
hostile page or client could send) and checks the answers and that the server stops.
"""
from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfetto_graph_ann.cli.main import main as cli_main
from perfetto_graph_ann.errors import InputError
from perfetto_graph_ann.serve import (PERFETTO_UI_ORIGIN, ServeConfig, ServeError, TraceServer, find_local_ui,
                                      served_name)

UI = PERFETTO_UI_ORIGIN


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "my run.pftrace"
    # larger than one socket buffer; framed as Perfetto packets (tag 0x0A, length 128), as `open`
    # serves only what reads as a trace
    p.write_bytes(b"".join(b"\x0a\x80\x01" + os.urandom(128) for _ in range(2400)))
    return p


def request(server: TraceServer, path: str, *, method: str = "GET", origin=None, host=None,
            headers=None) -> http.client.HTTPResponse:
    """Send exactly these bytes (no client-side path checks) and read the answer."""
    lines = [f"{method} {path} HTTP/1.1"]
    host = host if host is not None else f"127.0.0.1:{server.port}"
    if host != "":
        lines.append(f"Host: {host}")
    if origin is not None:
        lines.append(f"Origin: {origin}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    lines.append("Connection: close")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        resp.body = resp.read()  # type: ignore[attr-defined]
    return resp


def stopped(server: TraceServer, within: float = 5.0) -> bool:
    """True once nothing accepts connections on the server's port any more."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=0.5).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False


def started(cfg: ServeConfig) -> TraceServer:
    return TraceServer(cfg).start()


def _local_addresses() -> set:
    """This machine's IPv4 addresses that can be found without extra packages (maybe none)."""
    found = set()
    try:
        found |= {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        pass
    try:  # the address of the default route's interface; a UDP connect sends nothing
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect(("10.255.255.255", 1))
            found.add(u.getsockname()[0])
    except OSError:
        pass
    return found


def test_binds_loopback_only(trace):
    with started(ServeConfig(trace, port=0, timeout_s=5)) as s:
        assert s._httpd.socket.getsockname()[0] == "127.0.0.1"
        # Not reachable through any other local address of this machine.
        for addr in _local_addresses() - {"127.0.0.1"}:
            with pytest.raises(OSError):
                socket.create_connection((addr, s.port), timeout=1).close()


def test_serves_the_file_to_the_ui_then_stops(trace):
    s = started(ServeConfig(trace, port=0, timeout_s=10))
    assert s.trace_url == f"http://127.0.0.1:{s.port}/my_run.pftrace"
    assert s.ui_url == f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{s.port}/my_run.pftrace"
    r = request(s, "/my_run.pftrace", origin=UI)
    assert r.status == 200
    assert r.body == trace.read_bytes()
    assert r.getheader("Access-Control-Allow-Origin") == UI
    result = s.wait()
    assert result.reason == "fetched" and result.fetched
    assert stopped(s)


def test_preflight_for_the_ui_including_private_network_access(trace):
    with started(ServeConfig(trace, port=0, timeout_s=5)) as s:
        r = request(s, "/my_run.pftrace", method="OPTIONS", origin=UI,
                    headers={"Access-Control-Request-Method": "GET",
                             "Access-Control-Request-Private-Network": "true"})
        assert r.status == 204
        assert r.getheader("Access-Control-Allow-Origin") == UI
        assert r.getheader("Access-Control-Allow-Private-Network") == "true"
        r = request(s, "/my_run.pftrace", method="OPTIONS", origin="https://evil.example",
                    headers={"Access-Control-Request-Method": "GET"})
        assert r.status == 403 and r.getheader("Access-Control-Allow-Origin") is None
        assert not s.fetched


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://ui.perfetto.dev",
                                    "https://ui.perfetto.dev.evil.example", "http://127.0.0.1:1"])
def test_other_origins_are_refused(trace, origin):
    with started(ServeConfig(trace, port=0, timeout_s=5)) as s:
        r = request(s, "/my_run.pftrace", origin=origin)
        assert r.status == 403
        assert r.getheader("Access-Control-Allow-Origin") is None
        assert trace.read_bytes()[:100] not in r.body
        assert not s.fetched


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", ""])
def test_foreign_host_headers_are_refused(trace, host):
    """DNS rebinding: a page on another name resolved to 127.0.0.1 sends its own Host."""
    with started(ServeConfig(trace, port=0, timeout_s=5)) as s:
        r = request(s, "/my_run.pftrace", host=host.format(port=s.port))
        assert r.status == 403
        assert not s.fetched


TRAVERSALS = [
    "/", "/index.html", "/my%20run.pftrace", "/my run.pftrace", "/MY_RUN.PFTRACE", "/my_run.pftrace/",
    "//my_run.pftrace", "/./my_run.pftrace", "/../my_run.pftrace", "/%2e%2e/etc/passwd", "/../../../etc/passwd",
    "/..%2f..%2fetc%2fpasswd", "/my_run.pftrace/../../etc/passwd", "/%2Fetc%2Fpasswd", "/etc/passwd",
    "/my_run.pftrace%00", "/..\\..\\etc\\passwd", "http://127.0.0.1/my_run.pftrace", "*",
]


def test_path_traversal_and_other_names_are_404(trace):
    (trace.parent / "secret.txt").write_text("secret")
    with started(ServeConfig(trace, port=0, timeout_s=5)) as s:
        for path in TRAVERSALS + ["/secret.txt", "/../secret.txt", f"/{trace.parent.name}/secret.txt"]:
            r = request(s, path, origin=UI)
            assert r.status in (400, 404), path
            assert b"secret" not in r.body and trace.read_bytes()[:100] not in r.body, path
        assert not s.fetched


def test_only_get_head_options(trace):
    with started(ServeConfig(trace, port=0, timeout_s=5)) as s:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            r = request(s, "/my_run.pftrace", method=method, origin=UI)
            assert r.status in (404, 501), method
        r = request(s, "/status", method="POST", origin=UI)  # the UI's RPC probe
        assert r.status == 404
        r = request(s, "/my_run.pftrace", method="HEAD", origin=UI)
        assert r.status == 200 and int(r.getheader("Content-Length")) == trace.stat().st_size
        assert not s.fetched  # HEAD is not a fetch
        r = request(s, "/my_run.pftrace?x=1", origin=UI)  # a query string does not change the file
        assert r.status == 200 and r.body == trace.read_bytes()


def test_times_out_on_its_own(trace):
    s = started(ServeConfig(trace, port=0, timeout_s=0.3))
    t0 = time.monotonic()
    result = s.wait()
    assert result.reason == "timeout" and not result.fetched
    assert time.monotonic() - t0 < 3
    assert stopped(s)


def test_port_in_use_is_a_clear_error(trace):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ServeError, match=rf"^127\.0\.0\.1:{port}: port already in use"):
            TraceServer(ServeConfig(trace, port=port))


def test_missing_trace_names_the_file(tmp_path):
    missing = tmp_path / "nope.pftrace"
    with pytest.raises(InputError, match=r"nope\.pftrace: no such file"):
        TraceServer(ServeConfig(missing, port=0))
    with pytest.raises(InputError, match="not a regular file"):
        TraceServer(ServeConfig(tmp_path, port=0))


def test_cli_missing_trace_exits_2(tmp_path, capsys):
    missing = tmp_path / "nope.pftrace"
    assert cli_main(["open", str(missing), "--no-browser", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"error: {missing}: no such file" in err


def test_served_names_need_no_escaping():
    assert served_name("/a/b/my run (1).pftrace") == "my_run__1_.pftrace"
    assert served_name("x/.hidden") == "_.hidden"
    assert served_name("t/é.json.gz") == "_.json.gz"


# -- local UI --------------------------------------------------------------------------


def test_local_ui_serves_the_build_and_the_trace_only(trace):
    root = find_local_ui()
    bundle = next(root.glob("v*/frontend_bundle.js"))
    rel = bundle.relative_to(root).as_posix()
    s = started(ServeConfig(trace, port=0, local_ui=True, timeout_s=10, linger_s=0.5))
    own = s.origin
    assert s.ui_url == f"{own}/#!/?url={own}/my_run.pftrace"
    r = request(s, "/")
    assert r.status == 200 and r.body == (root / "index.html").read_bytes()
    r = request(s, "/" + rel)
    assert r.status == 200 and r.body == bundle.read_bytes()
    assert r.getheader("Content-Type").startswith("text/javascript")
    wasm = next(root.glob("v*/trace_processor.wasm"))
    r = request(s, "/" + wasm.relative_to(root).as_posix(), method="HEAD")
    assert r.getheader("Content-Type") == "application/wasm"
    # Outside the build folder: nothing, however the path is spelled.
    for path in (f"/{rel}/../../__init__.py", "/../__init__.py", "/..%2f__init__.py", "/%2e%2e/viewer.py",
                 f"/{rel.split('/')[0]}/../../viewer.py", "/web_dist/index.html"):
        assert request(s, path).status == 404, path
    # Its own origin and the hosted UI are allowed; others are not.
    assert request(s, "/my_run.pftrace", origin="https://evil.example").status == 403
    r = request(s, "/my_run.pftrace", origin=own)
    assert r.status == 200 and r.body == trace.read_bytes() and r.getheader("Access-Control-Allow-Origin") == own
    result = s.wait()  # lingers 0.5 s of quiet, then stops by itself
    assert result.reason == "fetched"
    assert stopped(s)


def test_local_ui_without_a_build_is_a_clear_error(trace, tmp_path):
    with pytest.raises(ServeError, match="not a Perfetto UI build"):
        TraceServer(ServeConfig(trace, port=0, local_ui=True, ui_dir=tmp_path))


def test_cli_end_to_end_in_a_subprocess(trace):
    """The real command: prints the address, serves once to the UI, exits 0 on its own."""
    proc = subprocess.Popen([sys.executable, "-m", "perfetto_graph_ann", "open", str(trace), "--no-browser",
                             "--port", "0", "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        url = None
        for line in proc.stdout:
            if line.startswith("open: "):
                url = line.split("?url=", 1)[1].strip()
                break
        assert url and url.startswith("http://127.0.0.1:")
        hostport, name = url[len("http://"):].split("/", 1)
        conn = http.client.HTTPConnection(hostport, timeout=5)
        conn.request("GET", "/" + name, headers={"Origin": UI})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == trace.read_bytes()
        conn.close()
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert "fetched the trace" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
