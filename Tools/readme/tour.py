#!/usr/bin/env python3
"""Runs the README tour's console examples as written, so the README cannot
drift from what the commands do.

Usage: tour.py CHORUS_BIN

The examples of "The `chorus` command" and "A running node" run in a
scratch directory with `chorus` being CHORUS_BIN. What a reader would type
differently is replaced, and only that: `/tmp/` is the scratch directory;
`USER` is Alice's user key (her `chorus whoami`, as the example says);
`rooftop.jpg` is a small JPEG made here; the API's port 7801 and the sync
port `serve` listens on are free ports of 127.0.0.1. A command ending in
`&` runs in the background until the end, and the next command waits for
its store's API socket. Every command must succeed, and what the examples
claim is checked: Bob sees Alice's picture, their digests are equal after
the exchange, the API answers the profile the served node just wrote, and
after `api-token rotate` the new token works and the old one does not. Exits 1 on the first failure."""
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
SECTIONS = ["### The `chorus` command", "### A running node: the local API, several writers"]
WAIT_SECONDS = 120  # a bound on waiting for a background server, not a speed


def console_blocks(readme):
    """The first console block of each section in SECTIONS, as command lines."""
    found = {}
    section = None
    inside = False
    for line in readme.splitlines():
        if inside:
            if line.strip() == "```":
                inside = False
            elif line.startswith("$ "):
                found[section].append(line[2:])
        elif line.startswith("#"):
            section = line.strip()
        elif line.strip() == "```console" and section in SECTIONS and section not in found:
            inside = True
            found[section] = []
    missing = [s for s in SECTIONS if not found.get(s)]
    if missing:
        fail(f"the README has no console block under {', '.join(missing)}")
    return [found[s] for s in SECTIONS]


def fail(message):
    print(f"README tour FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    api_port, sync_port = free_port(), free_port()
    background = []

    def chorus(*args):
        return subprocess.run([binary, *args], capture_output=True, text=True, env=env, timeout=WAIT_SECONDS)

    def user_of(store):
        out = chorus("whoami", "--store", store, "--json")
        if out.returncode != 0:
            fail(f"chorus whoami --store {store}: {out.stderr}")
        return json.loads(out.stdout)["user"]

    def concrete(line):
        line = line.replace("/tmp/", f"{work}/")
        line = line.replace("127.0.0.1:7801", f"127.0.0.1:{api_port}")
        if re.search(r"\bchorus serve\b", line) and "--listen" not in line:
            line = line.replace("chorus serve", f"chorus serve --listen 127.0.0.1:{sync_port}", 1)
        if re.search(r"\bUSER\b", line):
            line = re.sub(r"\bUSER\b", user_of(f"{work}/alice"), line)
        return line

    def wait_for_socket(line):
        store = re.search(r"--store (\S+)", line)
        if not store:
            return
        path = f"{store.group(1)}/api.sock"
        deadline = time.monotonic() + WAIT_SECONDS
        while not os.path.exists(path):
            if any(p.poll() is not None for p in background):
                fail(f"the background command stopped: {line}")
            if time.monotonic() > deadline:
                fail(f"no API socket at {path} after {WAIT_SECONDS} s: {line}")
            time.sleep(0.1)

    def get_profile(token):
        request = urllib.request.Request(f"http://127.0.0.1:{api_port}/v1/profile",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=WAIT_SECONDS) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    outputs = []
    old_token = None

    def check_exchange():
        digests = [chorus("query", "digest", "--store", f"{work}/{who}", "--json").stdout for who in ("alice", "bob")]
        if digests[0] != digests[1] or not digests[0].strip():
            fail(f"Alice's and Bob's digests differ after the exchange: {digests}")
        gallery = next((out for line, out in outputs if line.startswith("chorus query pictures")), "")
        if "Lisbon at dusk" not in gallery:
            fail(f"Bob's view of Alice's gallery lacks her picture: {gallery!r}")

    try:
        for block in blocks:
            for original in block:
                line = concrete(original)
                print(f"$ {original}")
                if "api-token rotate" in line:
                    with open(f"{work}/alice/keys/api.token") as f:
                        old_token = f.read().strip()
                if line.rstrip().endswith("&"):
                    command = line.rstrip()[:-1]
                    background.append(subprocess.Popen(
                        ["bash", "-c", f"exec {command}"], cwd=work, env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    wait_for_socket(command)
                    continue
                result = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True,
                                        timeout=WAIT_SECONDS)
                sys.stdout.write(result.stdout if result.stdout.endswith("\n") or not result.stdout else result.stdout + "\n")
                if result.returncode != 0:
                    fail(f"`{original}` exited {result.returncode}: {result.stderr.strip()}")
                outputs.append((original, result.stdout))

            if block is blocks[0]:
                check_exchange()
        profile = next((out for line, out in outputs if line.startswith("curl")), "")
        if "Posting while serving" not in profile:
            fail(f"the API did not answer the profile written while serving: {profile!r}")
        with open(f"{work}/alice/keys/api.token") as f:
            token = f.read().strip()
        status, body = get_profile(token)
        if status != 200 or "Posting while serving" not in body:
            fail(f"the token in keys/api.token after rotating is not accepted: {status} {body}")
        if old_token is None or get_profile(old_token)[0] != 401:
            fail("the token from before `api-token rotate` still works")
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
