#!/usr/bin/env python3
"""Regenerate the "All options" blocks of the docs pages from the program.

Each block sits between `<!-- options: COMMAND -->` and `<!-- /options -->` on a page of docs/ (or
README.md) and is what `cnnscale --options-reference COMMAND` prints: every option of the command and
of its subcommands, grouped as --help groups them. This rewrites every block in place; the test
OptionsReference.* (tests/cpu/test_options_reference.cpp) fails while one differs.

Usage, from the source tree: python3 scripts/update_options_reference.py [CNNSCALE]
(CNNSCALE: the executable, default build/bin/cnnscale).
"""
import pathlib
import re
import subprocess
import sys

BLOCK = re.compile(r"(?m)^(<!-- options: ([^\n]+) -->)\n.*?^(<!-- /options -->)$", re.S)


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    program = sys.argv[1] if len(sys.argv) > 1 else str(root / "build/bin/cnnscale")
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted(root.glob("*/README.md"))]

    def block(match: re.Match) -> str:
        text = subprocess.run([program, "--options-reference", match.group(2)], check=True, capture_output=True,
                              text=True).stdout
        return f"{match.group(1)}\n\n{text.strip(chr(10))}\n\n{match.group(3)}"

    for page in pages:
        old = page.read_text()
        new = BLOCK.sub(block, old)
        if new != old:
            page.write_text(new)
            print(f"updated {page.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
