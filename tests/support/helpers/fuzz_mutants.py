"""Bugs seeded one at a time into a copy of the package, and the example at which each test of
``tests/offline/test_envelope_fuzz.py`` first fails on it: what the fuzz's sizes rest on. Run it by
hand after changing the fuzz's strategies or sizes (some ten minutes):

    python tests/support/helpers/fuzz_mutants.py [NAME ...]

A bug whose line has left the source is reported as gone, not run. The bugs no fuzz test
catches are caught by the example tests of ``tests/offline/test_envelope.py``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
ENVELOPE = "nexusflow/transports/oneshot/envelope.py"
TRANSPORT = "nexusflow/transports/oneshot/transport.py"
BUGS: dict[str, tuple[str, str, str]] = {
    "one unescape layer": (ENVELOPE, "_UNESCAPES = 3", "_UNESCAPES = 1"),
    "no HTML unescape": (ENVELOPE, "(html.unescape(text), _unescape_json(text))", "(_unescape_json(text),)"),
    "no \\uXXXX unescape": (ENVELOPE, """|u[0-9a-fA-F]{4})')""", """)')"""),
    "unsorted signature keys": (ENVELOPE, "json.dumps(normal(value), sort_keys=True)", "json.dumps(normal(value))"),
    "the call id in the signature": (
        ENVELOPE,
        "return name, _canonical(",
        "return name + str(raw.get('id')), _canonical(",
    ),
    "no search inside a found object": (ENVELOPE, "values.extend(value.values())", "pass"),
    "only a result's first object": (
        ENVELOPE,
        "for _, _, found in _objects(text):",
        "for _, _, found in _objects(text)[:1]:",
    ),
    "an unknown tool let through": (
        ENVELOPE,
        "    if name not in tools:",
        "    if name not in tools and name != 'rm_rf':",
    ),
    "a name left unrepaired": (
        ENVELOPE,
        'return repair_text(name if len(name) <= 80 else name[:80] + "…")',
        "return name",
    ),
    "a launch over budget": (
        TRANSPORT,
        "attempts = 1 + self.config.repair_budget",
        "attempts = 2 + self.config.repair_budget",
    ),
}
TESTS = [
    "test_every_reply_is_a_reply_or_a_complaint",
    "test_a_quoted_envelope_never_yields_its_calls",
    "test_the_repair_loop_ends_within_its_budget",
]


def first_failures(root: Path) -> None:
    """In a process of its own (the mutated package imported from ``root``): run each test,
    counting examples until the first that fails."""
    sys.path[:0] = [str(root), str(root / "tests" / "offline"), str(root / "tests" / "support")]
    import test_envelope_fuzz as fuzz

    for name in TESTS:
        test = getattr(fuzz, name)
        inner, seen = test.hypothesis.inner_test, {"examples": 0, "failed": 0}

        def counted(*args: object, _inner: Any = inner, _seen: dict[str, int] = seen, **kwargs: object) -> None:
            _seen["examples"] += not _seen["failed"]
            try:
                _inner(*args, **kwargs)
            except BaseException:
                _seen["failed"] = _seen["failed"] or _seen["examples"]
                raise

        test.hypothesis.inner_test = counted
        try:
            test()
            print(f"  {name}: passed {seen['examples']} examples", flush=True)
        except BaseException as exc:  # the seeded bug, as the test reports it
            print(f"  {name}: fails at example {seen['failed']} ({type(exc).__name__})", flush=True)


def main(names: list[str]) -> int:
    for bug in names or list(BUGS):
        path, line, seeded = BUGS[bug]
        with tempfile.TemporaryDirectory(prefix="nexusflow-mutant-") as folder:
            root = Path(folder)
            for part in ("nexusflow", "tests"):
                shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
            source = (root / path).read_text(encoding="utf-8")
            print(f"{bug}:", flush=True)
            if line not in source:
                print(f"  gone from {path}: {line!r}")
                continue
            (root / path).write_text(source.replace(line, seeded, 1), encoding="utf-8")
            here = [sys.executable, __file__, "--in", folder]
            subprocess.run(here, cwd=folder, check=False, stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--in"]:
        first_failures(Path(sys.argv[2]))
    else:
        sys.exit(main(sys.argv[1:]))
