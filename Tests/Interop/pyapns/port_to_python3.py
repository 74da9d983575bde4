"""Applies a minimal Python 3 syntax port to PyAPNs 2.0.1's apns.py, without changing what it does.

PyAPNs (PyPI `apns` 2.0.1) is Python 2 code. Only these spellings change:
  - `except E, name:`  ->  `except E as name:`   (the Python 3 syntax for the same thing)
  - `xrange(`          ->  `range(`              (the same iteration)
  - `sys.exc_clear()`  ->  `pass`                (Python 3 clears the exception itself)
Every other line is the published file, byte for byte. The port refuses to run when the input
is not the expected file (its SHA-256 is checked by the caller's download step) or when a
pattern it expects is missing, so a different file is never silently half-ported.

usage: port_to_python3.py SDIST.tar.gz OUTPUT_DIR
"""
import re
import sys
import tarfile

sdist, output = sys.argv[1], sys.argv[2]
with tarfile.open(sdist) as archive:
    source = archive.extractfile("apns-2.0.1/apns.py").read().decode("utf-8")

rules = [
    (re.compile(r"except ([\w.]+), (\w+):"), r"except \1 as \2:", 2),
    (re.compile(r"\bxrange\("), "range(", 4),
    (re.compile(r"sys\.exc_clear\(\)"), "pass", 2),
]
for pattern, replacement, expected in rules:
    source, count = pattern.subn(replacement, source)
    if count != expected:
        sys.exit(f"port_to_python3: expected {expected} matches of {pattern.pattern}, found {count}")

with open(f"{output}/apns.py", "w", encoding="utf-8") as ported:
    ported.write(source)
