#!/usr/bin/env python3
"""Runs the README tour's console examples as written, so the README cannot
drift from what the commands do.

Usage: tour.py CHORUS_BIN

The console blocks of "The `chorus` command", "A running node" and
"Running many relays" run in a scratch directory with `chorus` being
CHORUS_BIN; lines that do not start with `$ ` are sample output and are
not compared. What a reader would type differently is replaced, and only
that: `/tmp/` and `/srv/` are the scratch directory; `USER` is Alice's
user key (her `chorus whoami`, as the example says); `rooftop.jpg` is a
small JPEG made here; the API's port 7801, the sync port `serve` listens
on and the relays' host names are free ports of 127.0.0.1; `KEY1` and
`KEY2` are the relays' device keys. The relays section presumes stores the
README does not create there: a founder's network, two relays of it (the
second one serving too) and a user who joined with the founder's invite
(`CHORUS_STORE`); those are made here with `chorus init`. A command ending
in `&` runs in the background until the end, and the next command waits
until it answers. Every command must succeed, and what the examples claim
is checked: Bob sees Alice's picture and their digests are equal after the
exchange; the API answers the profile the served node just wrote, and
after `api-token rotate` the new token works and the old one does not; the
invite carries the bootstrap relay, the user's list names both relays, and
`chorus sync` reaches both. Exits 1 on the first failure."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECTIONS = [
    "### The `chorus` command",
    "### A running node: the local API, several writers",
    "### Running many relays",
]
WAIT_SECONDS = 120  # a bound on waiting for a background server, not a speed


def console_blocks(readme):
    """Every console block of each section in SECTIONS, as command lines."""
    found = {s: [] for s in SECTIONS}
    section = None
    block = None
    for line in readme.splitlines():
        if block is not None:
            if line.strip() == "```":
                block = None
            elif line.startswith("$ "):
                block.append(line[2:])
        elif line.startswith("#"):
            section = line.strip()
        elif line.strip() == "```console" and section in found:
            block = []
            found[section].append(block)
    missing = [s for s in SECTIONS if not found[s]]
    if missing:
        fail(f"the README has no console block under {', '.join(missing)}")
    return found


def fail(message):
    print(f"README tour FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port):
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    binary = os.path.abspath(sys.argv[1])
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = console_blocks(f.read())
    work = tempfile.mkdtemp(prefix="chorus-readme-")
    os.makedirs(f"{work}/bin")
    os.symlink(binary, f"{work}/bin/chorus")
    # A JPEG's first bytes are all `picture add` needs to know its type.
    with open(f"{work}/rooftop.jpg", "wb") as f:
        f.write(bytes([0xFF, 0xD8, 0xFF, 0xE0, 0, 16]) + b"JFIF\0" + bytes(64) + bytes([0xFF, 0xD9]))
    env = dict(os.environ, PATH=f"{work}/bin:{os.environ['PATH']}", CHORUS_STORE="")
    api_port, sync_port, relay1_port, relay2_port = free_port(), free_port(), free_port(), free_port()
    keys = {}
    background = []
    outputs = {}
    old_token = None

    def chorus(*args, ok=True):
        result = subprocess.run([binary, *args], capture_output=True, text=True, env=env, timeout=WAIT_SECONDS)
        if ok and result.returncode != 0:
            fail(f"chorus {' '.join(args)}: {result.stderr.strip()}")
        return result

    def whoami(store, field):
        return json.loads(chorus("whoami", "--store", store, "--json").stdout)[field]

    def concrete(line):
        line = line.replace("/tmp/", f"{work}/").replace("/srv/", f"{work}/")
        line = line.replace("127.0.0.1:7801", f"127.0.0.1:{api_port}")
        line = line.replace("0.0.0.0:7800", f"127.0.0.1:{relay1_port}")
        line = line.replace("relay1.example.org:7800", f"127.0.0.1:{relay1_port}")
        line = line.replace("relay2.example.org:7800", f"127.0.0.1:{relay2_port}")
        for name, key in keys.items():
            line = re.sub(rf"\b{name}\b", key, line)
        if re.search(r"\bchorus serve\b", line) and "--listen" not in line:
            line = line.replace("chorus serve", f"chorus serve --listen 127.0.0.1:{sync_port}", 1)
        if re.search(r"\bUSER\b", line):
            line = re.sub(r"\bUSER\b", whoami(f"{work}/alice", "user"), line)
        return line

    def start(command):
        """Runs `command` in the background and waits until it answers:
        its store's API socket, and its --listen port."""
        background.append(subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        store = re.search(r"--store (\S+)", command)
        listen = re.search(r"--listen 127\.0\.0\.1:(\d+)", command)
        deadline = time.monotonic() + WAIT_SECONDS
        while not ((store is None or os.path.exists(f"{store.group(1)}/api.sock"))
                   and (listen is None or answers(int(listen.group(1))))):
            if background[-1].poll() is not None:
                fail(f"the background command stopped: {command}")
            if time.monotonic() > deadline:
                fail(f"not answering after {WAIT_SECONDS} s: {command}")
            time.sleep(0.1)

    def run_block(block):
        nonlocal old_token
        for original in block:
            line = concrete(original)
            print(f"$ {original}")
            if "api-token rotate" in line:
                with open(f"{work}/alice/keys/api.token") as f:
                    old_token = f.read().strip()
            if line.rstrip().endswith("&"):
                start(line.rstrip()[:-1].strip())
                continue
            result = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True,
                                    timeout=WAIT_SECONDS)
            sys.stdout.write(result.stdout if result.stdout.endswith("\n") or not result.stdout else result.stdout + "\n")
            if result.returncode != 0:
                fail(f"`{original}` exited {result.returncode}: {result.stderr.strip()}")
            outputs[original.split("#")[0].strip()] = result.stdout

    def output_of(prefix):
        return next((out for line, out in outputs.items() if line.startswith(prefix)), "")

    def get_profile(token):
        request = urllib.request.Request(f"http://127.0.0.1:{api_port}/v1/profile",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=WAIT_SECONDS) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    try:
        # The `chorus` command: two stores exchange files.
        for block in blocks[SECTIONS[0]]:
            run_block(block)
        digests = [chorus("query", "digest", "--store", f"{work}/{who}", "--json").stdout for who in ("alice", "bob")]
        if digests[0] != digests[1]:
            fail(f"Alice's and Bob's digests differ after the exchange: {digests}")
        if "Lisbon at dusk" not in output_of("chorus query pictures"):
            fail(f"Bob's view of Alice's gallery lacks her picture: {output_of('chorus query pictures')!r}")

        # A running node: its API and token.
        for block in blocks[SECTIONS[1]]:
            run_block(block)
        if "Posting while serving" not in output_of("curl"):
            fail(f"the API did not answer the profile written while serving: {output_of('curl')!r}")
        with open(f"{work}/alice/keys/api.token") as f:
            status, body = get_profile(f.read().strip())
        if status != 200 or "Posting while serving" not in body:
            fail(f"the token in keys/api.token after rotating is not accepted: {status} {body}")
        if old_token is None or get_profile(old_token)[0] != 401:
            fail("the token from before `api-token rotate` still works")

        # Many relays: the stores the section presumes, then the operator's
        # block, a user who joins with the invite, and the user's block.
        operator, user = blocks[SECTIONS[2]][:2]
        chorus("init", "--store", f"{work}/founder", "--name", "Founder")
        for n, port in ((1, relay1_port), (2, relay2_port)):
            chorus("init", "--store", f"{work}/relay{n}", "--network", f"{work}/founder/network.json")
            keys[f"KEY{n}"] = whoami(f"{work}/relay{n}", "device")
        start(f"chorus serve --store {work}/relay2 --listen 127.0.0.1:{relay2_port} --host listed")
        run_block(operator)
        invite = output_of("chorus network invite").strip()
        chorus("init", "--store", f"{work}/user", "--name", "User", "--network", invite)
        bootstrap = json.loads(chorus("network", "show", "--store", f"{work}/user", "--json").stdout)
        if keys["KEY1"] not in json.dumps(bootstrap):
            fail(f"the invite does not carry the bootstrap relay: {bootstrap}")
        env["CHORUS_STORE"] = f"{work}/user"
        run_block(user)
        listed = json.loads(output_of("chorus relays show --json"))
        if len(listed.get("relays", [])) != 2:
            fail(f"the user's relay list does not name both relays: {listed}")
        synced = output_of("chorus sync")
        for port in (relay1_port, relay2_port):
            if f"127.0.0.1:{port}" not in synced:
                fail(f"chorus sync did not reach the relay on port {port}: {synced!r}")
        print("README tour: every example ran as written")
    finally:
        for p in background:
            p.send_signal(signal.SIGTERM)
        for p in background:
            try:
                p.wait(timeout=WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
