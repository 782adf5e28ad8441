"""Puts tiktoken's encoding files into a cache directory from local copies, so
tiktoken (LangChain's OpenAIEmbeddings tokenizes with cl100k_base) never
downloads them:

    python tiktoken_cache.py ASSETS_DIR CACHE_DIR

ASSETS_DIR holds `<encoding>.tiktoken` files: the tiktoken-rs crate ships
them (crates.io, locked in Cargo.lock). tiktoken looks a file up in
TIKTOKEN_CACHE_DIR under the SHA-1 of its download URL and accepts it only
when its SHA-256 is the one tiktoken expects; both are read from tiktoken's
own source here, and the result is checked by loading each encoding with
every network path closed. Run by scripts/lib/common.sh
(ensure_sdk_python); idempotent.
"""
import hashlib
import inspect
import os
import re
import shutil
import subprocess
import sys

ENCODINGS = ("cl100k_base", "o200k_base")


def main():
    assets, cache = sys.argv[1], sys.argv[2]
    import tiktoken_ext.openai_public as public

    source = inspect.getsource(public)
    os.makedirs(cache, exist_ok=True)
    for name in ENCODINGS:
        found = re.search(r'"([^"]+/%s\.tiktoken)",\s*expected_hash="([0-9a-f]{64})"' % name, source)
        if not found:
            sys.exit(f"tiktoken_cache: cannot find {name}'s URL and hash in {public.__file__}")
        url, expected = found.groups()
        target = os.path.join(cache, hashlib.sha1(url.encode()).hexdigest())
        if os.path.exists(target) and sha256(target) == expected:
            continue
        local = os.path.join(assets, f"{name}.tiktoken")
        if not os.path.exists(local) or sha256(local) != expected:
            sys.exit(f"tiktoken_cache: {local} is missing or is not the {name} tiktoken expects (sha256 {expected})")
        shutil.copyfile(local, target + ".tmp")
        os.replace(target + ".tmp", target)
    # Load each encoding as a client would, with the network closed.
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=cache, HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9", NO_PROXY="", no_proxy="")
    probe = "import sys, tiktoken\nfor n in sys.argv[1:]: tiktoken.get_encoding(n).encode('offline check')"
    subprocess.run([sys.executable, "-c", probe, *ENCODINGS], env=env, check=True, timeout=120)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


if __name__ == "__main__":
    main()
