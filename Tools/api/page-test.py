#!/usr/bin/env python3
"""Tests the node's web page (Specs/api.md §7) in a real browser.

Alice's node serves its local API on TCP; headless Chromium opens the page
with her bearer token (in the URL's fragment) and a chat. The test checks that
her profile shows her pictures in her gallery order, each image decoded by the
browser, and that a message Bob sends from his own node and syncs appears on
the open page within 2 seconds, without a reload.

Then, with the viewer logged in, the same browser opens pages from another
port of 127.0.0.1 and from another host name (mapped to 127.0.0.1, as DNS
rebinding would) that try to make it write to Alice's node: change her
profile, follow Bob, like a picture, with fetch and with forms. None may
succeed, no cookie may hold a credential, and the rebound name must not even
get the page (Specs/api.md §3).

Chromium is driven over the DevTools protocol on a pipe (file descriptors 3
and 4), so nothing beyond the Python standard library is needed.

Usage: page-test.py PATH_TO_CHORUS     Exit 0: passed or skipped (no browser), 1: failed.
"""
import http.server, json, os, re, shutil, signal, struct, subprocess, sys, tempfile, threading, time, zlib

LIVE_DEADLINE = 2.0


def fail(message):
    print(f"page test FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def png(width, height, rgb):
    """A valid PNG of one colour."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe."""

    def __init__(self, path, profile):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def wire():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        # rebound.test resolves to 127.0.0.1: a name an attacker's DNS could point at the API.
        args = [path, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--host-resolver-rules=MAP rebound.test 127.0.0.1",
                "about:blank"]
        self.process = subprocess.Popen(args, preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b""
        self.next_id = 0
        self.session = None

    def send(self, method, params=None, session=True, timeout=15):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            import select
            ready, _, _ = select.select([self.from_browser], [], [], 0.2)
            if ready:
                data = os.read(self.from_browser, 1 << 16)
                if not data:
                    raise RuntimeError("the browser closed its DevTools pipe")
                self.buffer += data
        raise RuntimeError(f"{method}: no answer within {timeout} s")

    def open(self, url):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})

    def evaluate(self, expression):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        error = self.evaluate("document.getElementById('error') && document.getElementById('error').textContent")
        fail(f"{what} within {timeout} s (page error: {error!r})")

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


ATTACK_PAGE = """<!doctype html><html><body><iframe name="sink"></iframe><script>
(async () => {
  const api = "API";
  const body = JSON.stringify({ field: "bio", value: "pwned" });
  const results = [];
  async function attempt(name, request) {
    try { const r = await request(); results.push(name + ": " + (r.type === "opaque" ? "opaque" : r.status)); }
    catch (e) { results.push(name + ": blocked"); }
  }
  await attempt("profile, no-cors, text/plain", () => fetch(api + "/v1/profile",
    { method: "POST", mode: "no-cors", credentials: "include", headers: { "Content-Type": "text/plain" }, body }));
  await attempt("follow, no-cors", () => fetch(api + "/v1/following/BOB", { method: "POST", mode: "no-cors", credentials: "include" }));
  await attempt("like, no-cors, a stolen token", () => fetch(api + "/v1/likes/PICTURE",
    { method: "POST", mode: "no-cors", credentials: "include", headers: { Authorization: "Bearer TOKEN" } }));
  await attempt("profile, cors, a stolen token", () => fetch(api + "/v1/profile",
    { method: "POST", credentials: "include", headers: { "Content-Type": "application/json", Authorization: "Bearer TOKEN" }, body }));
  for (const [action, enctype] of [["/v1/following/BOB", "application/x-www-form-urlencoded"], ["/v1/profile", "text/plain"]]) {
    const form = document.createElement("form");
    form.method = "POST"; form.action = api + action; form.target = "sink"; form.enctype = enctype;
    const field = document.createElement("input"); field.name = '{"field":"bio","value":"pwned","x":"'; field.value = '"}';
    form.append(field); document.body.append(form); form.submit();
    results.push("form " + action);
    await new Promise((r) => setTimeout(r, 300));
  }
  window.attackResults = results;
})();
</script></body></html>"""


def serve_attack_page(page):
    """Serves `page` at / on a free port of 127.0.0.1; returns the server (shutdown() stops it)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            data = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def attack_from_other_origins(browser, api_port, bob_user, picture, token):
    """Opens attack pages on another port and on a rebound host name while the viewer is logged in; returns the attempts made."""
    made = 0
    for api in (f"http://127.0.0.1:{api_port}", f"http://rebound.test:{api_port}"):
        page = ATTACK_PAGE.replace("API", api).replace("BOB", bob_user).replace("PICTURE", picture).replace("TOKEN", token)
        server = serve_attack_page(page)
        try:
            for host in ("127.0.0.1", "rebound.test"):
                browser.open(f"http://{host}:{server.server_address[1]}/")
                results = browser.wait_for("window.attackResults", 20, f"the attack page on {host} finishes")
                made += len(results)
        finally:
            server.shutdown()
    # The rebound name does not even get the page.
    browser.open(f"http://rebound.test:{api_port}/#token={token}")
    text = browser.wait_for("document.readyState === 'complete' && document.body && document.body.innerText", 20,
                            "the rebound name gets an answer")
    if "host_not_allowed" not in text:
        fail(f"the API answered a request for the rebound name: {text[:200]!r}")
    return made


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    chorus = os.path.abspath(sys.argv[1])
    browser_path = find_browser()
    if not browser_path:
        print("page test skipped: no Chromium on this machine (apt-get install chromium)")
        return
    work = tempfile.mkdtemp(prefix="chorus-page-test.")
    env = dict(os.environ, CHORUS_STORE="")
    server = browser = None

    def chorus_run(*args, store):
        result = subprocess.run([chorus, *args, "--store", store], capture_output=True, text=True, env=env, timeout=120)
        if result.returncode != 0:
            fail(f"chorus {' '.join(args)}: exit {result.returncode}: {result.stderr}")
        return result.stdout

    try:
        alice, bob = f"{work}/alice", f"{work}/bob"
        chorus_run("init", "--name", "Alice", store=alice)
        chorus_run("init", "--name", "Bob", "--network", f"{alice}/network.json", store=bob)
        # A direction override in a name must not reach the page as one.
        chorus_run("profile", "set", "name", "Bob\u202egnp.exe", store=bob)
        bob_user = json.loads(chorus_run("whoami", "--json", store=bob))["user"]
        pictures = []
        for i, (w, h, rgb) in enumerate([(8, 6, (200, 40, 40)), (6, 6, (40, 200, 40)), (10, 4, (40, 40, 200))]):
            path = f"{work}/p{i}.png"
            with open(path, "wb") as f:
                f.write(png(w, h, rgb))
            pictures.append(chorus_run("picture", "add", path, "--caption", f"picture {i}", store=alice).splitlines()[0])
        chorus_run("picture", "move", pictures[2], "--first", store=alice)
        chat = chorus_run("chat", "create", "--title", "Rooftops", "--member", bob_user, store=alice).splitlines()[0]

        log_path = f"{work}/serve.log"
        log = open(log_path, "w")
        server = subprocess.Popen([chorus, "serve", "--store", alice, "--listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0"],
                                  stderr=log, stdout=subprocess.DEVNULL, env=env)
        sync_port = api_port = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (sync_port and api_port):
            text = open(log_path).read()
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            sync_port = m and m.group(1)
            m = re.search(r"local API on 127\.0\.0\.1:(\d+)", text)
            api_port = m and m.group(1)
            time.sleep(0.05)
        if not (sync_port and api_port):
            fail(f"chorus serve did not start: {open(log_path).read()}")
        token = open(f"{alice}/keys/api.token").read().strip()
        chorus_run("sync", f"127.0.0.1:{sync_port}", store=bob)
        # Alice's gallery order, as her node (through its server) reports it.
        expected = [p["id"] for p in json.loads(chorus_run("query", "pictures", "--json", store=alice))]
        if expected != [pictures[2], pictures[0], pictures[1]]:
            fail(f"gallery order from the CLI is {expected}")

        browser = Browser(browser_path, f"{work}/profile")
        browser.open(f"http://127.0.0.1:{api_port}/?chat={chat}#token={token}")
        browser.wait_for("document.querySelectorAll('#gallery figure').length === 3", 20, "the gallery shows 3 pictures")
        shown = browser.evaluate("[...document.querySelectorAll('#gallery figure')].map(f => f.dataset.picture)")
        if shown != expected:
            fail(f"the page shows the gallery in the order {shown}, the node's is {expected}")
        browser.wait_for("[...document.querySelectorAll('#gallery img')].every(i => i.complete && i.naturalWidth > 0)", 10,
                         "every gallery image is loaded and decoded")
        sizes = browser.evaluate("[...document.querySelectorAll('#gallery img')].map(i => [i.naturalWidth, i.naturalHeight])")
        if sizes != [[10, 4], [8, 6], [6, 6]]:
            fail(f"the images decoded to sizes {sizes}")
        browser.wait_for("document.getElementById('chat-title').textContent === 'Rooftops'", 10, "the chat opens")
        # People by name, the id on hover; the override neutralised.
        browser.wait_for("document.getElementById('chat-members').textContent.includes('Bob\\ufffdgnp.exe')", 10,
                         "the members show Bob's name with the direction override neutralised")
        if browser.evaluate("document.body.innerText.includes('\\u202e')"):
            fail("a direction override reached the page")
        browser.evaluate("window.__notReloaded = true")

        text = f"live from Bob {os.getpid()}"
        chorus_run("chat", "send", chat, "--text", text, store=bob)
        chorus_run("sync", f"127.0.0.1:{sync_port}", store=bob)
        synced = time.monotonic()  # Alice's node has committed the message
        browser.wait_for(f"document.getElementById('messages').textContent.includes({json.dumps(text)})", LIVE_DEADLINE,
                         "Bob's message appears on the open page")
        latency = time.monotonic() - synced
        if not browser.evaluate("window.__notReloaded === true"):
            fail("the page reloaded")
        if token in browser.evaluate("location.href"):
            fail("the token stayed in the page's address")
        # The log tab lists the latest events first.
        browser.evaluate("document.querySelector('#tabs button[data-tab=\"log\"]').click()")
        browser.wait_for("document.querySelectorAll('#events tr').length > 2", 10, "the log lists events")
        arrivals = browser.evaluate("[...document.querySelectorAll('#events tr')].slice(1).map(r => Number(r.cells[0].textContent))")
        if arrivals != sorted(arrivals, reverse=True):
            fail(f"the log is not newest first: {arrivals}")

        attacks = attack_from_other_origins(browser, api_port, bob_user, pictures[0], token)
        cookies = browser.send("Storage.getCookies", session=False).get("cookies", [])
        if cookies:
            fail(f"the browser holds cookies for the API: {cookies}")
        profile = json.loads(chorus_run("query", "profile", "--json", store=alice))
        if "pwned" in json.dumps(profile):
            fail(f"a page on another origin changed the profile: {profile}")
        alice_user = json.loads(chorus_run("whoami", "--json", store=alice))["user"]
        following = json.loads(chorus_run("query", "following", alice_user, "--json", store=alice))
        if bob_user in json.dumps(following):
            fail("a page on another origin made Alice follow Bob")
        likes = json.loads(chorus_run("query", "likes", pictures[0], "--json", store=alice))
        if likes:
            fail(f"a page on another origin liked a picture: {likes}")
        print(f"page test passed: gallery in order with decoded images; a synced message appeared after {latency:.2f} s without reload; "
              f"{attacks} write attempts from another port and a rebound host name changed nothing; no cookie")
    finally:
        if browser:
            browser.close()
        if server:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
