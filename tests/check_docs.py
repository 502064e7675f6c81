#!/usr/bin/env python3
"""Write, or check, the variable tables of the manual from the roles' argument specs.

A page holds a table between two markers; everything outside them is hand-written prose:

    <!-- BEGIN VARIABLES <role> <entry point> -->
    (generated: do not edit)
    <!-- END VARIABLES -->

Every entry point that a role declares in `meta/argument_specs.yml` (`main`, and any other, such
as `run` or `stop`) must have such a block on some page. The table lists the entry point's options
in the spec's order: name, type, default and description. For `main` the default is the value in
`defaults/main.yml` (a spec's `default:` is documentation only); for any other entry point, whose
parameters the caller passes, it is the spec's `default:`. A role whose `short_description` starts
with "Internal" (in any of its entry points) is documented in `docs/design.md`, not on a user's page.

    python tests/check_docs.py           # check (make lint): exit 1, naming page and role
    python tests/check_docs.py --write   # rewrite every table (make docs)

The check also finds relative links in README.md and docs/ whose file or heading is missing.
Pages are README.md, docs/**/*.md and roles/*/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DESIGN_PAGE = "docs/design.md"
INTERNAL_PREFIX = "Internal"
BEGIN = "<!-- BEGIN VARIABLES"
BEGIN_RE = re.compile(r"^<!-- BEGIN VARIABLES (\S+) (\S+) -->$")
END = "<!-- END VARIABLES -->"
NO_DEFAULT = "(none)"
REQUIRED = "(required)"


class DocsError(Exception):
    """A page or a spec that the generator cannot read; the message names the file."""


@dataclass(frozen=True)
class EntryPoint:
    """One entry point of one role: what its table is made of."""

    role: str
    name: str
    short_description: str
    options: dict
    defaults: dict = field(default_factory=dict)
    # The role's, not the entry point's: any of its entry points' short_description starts with "Internal".
    internal: bool = False
    # The options are main's own (a YAML alias in the spec: a job's checks validate main's options).
    options_of_main: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.role, self.name)


@dataclass(frozen=True)
class Block:
    """A BEGIN ... END pair on a page; `begin` and `end` are 0-based line numbers of the markers."""

    role: str
    entry_point: str
    begin: int
    end: int


# --- Reading the roles ---


def _first_file(*candidates: Path) -> Path | None:
    return next((path for path in candidates if path.is_file()), None)


def _yaml(path: Path, root: Path):
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise DocsError(f"{path.relative_to(root)}: not YAML: {err}") from err


def load_entry_points(root: Path) -> list[EntryPoint]:
    """Every entry point of every role under root/roles, in role order, then the spec's order."""
    entries = []
    for role in sorted({path.parent.parent for path in root.glob("roles/*/meta/argument_specs.y*ml")}):
        spec_file = _first_file(role / "meta/argument_specs.yml", role / "meta/argument_specs.yaml")
        specs = (_yaml(spec_file, root) or {}).get("argument_specs") or {}
        defaults_file = _first_file(role / "defaults/main.yml", role / "defaults/main.yaml")
        defaults = (_yaml(defaults_file, root) or {}) if defaults_file else {}
        described = {name: str((spec or {}).get("short_description") or "").strip() for name, spec in specs.items()}
        internal = any(text.startswith(INTERNAL_PREFIX) for text in described.values())
        main_options = (specs.get("main") or {}).get("options")
        for name, spec in specs.items():
            entries.append(
                EntryPoint(
                    role=role.name,
                    name=str(name),
                    short_description=described[name],
                    options=(spec or {}).get("options") or {},
                    defaults=defaults if name == "main" else {},
                    internal=internal,
                    options_of_main=name != "main" and bool(main_options)
                    and (spec or {}).get("options") is main_options,
                )
            )
    return entries


# --- Rendering ---

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# A code span already in the text, or Ansible's markup: C(code), V(value), O(option), M(module),
# I(italic), B(bold), U(url), L(text, url).
_TOKEN = re.compile(r"(`+)(.+?)\1|\b([CVOMIBU])\(([^()]*)\)|\bL\(([^(),]*),\s*([^()]*)\)")


def _escaped(text: str) -> str:
    """Prose with what Markdown would eat escaped: a backslash, <tag>-like text, a stray asterisk."""
    return text.replace("\\", "\\\\").replace("<", "\\<").replace("*", "\\*")


def markdown(text: str) -> str:
    """Spec prose as Markdown: Ansible's markup converted, code kept verbatim, the rest escaped."""
    out, pos = [], 0
    for match in _TOKEN.finditer(text):
        out.append(_escaped(text[pos : match.start()]))
        pos = match.end()
        code, kind, inner, label, url = match.group(1), match.group(3), match.group(4), match.group(5), match.group(6)
        if code:
            out.append(match.group(0))
        elif kind in "CVOM":
            out.append(_code(inner))
        elif kind == "I":
            out.append(f"*{_escaped(inner)}*")
        elif kind == "B":
            out.append(f"**{_escaped(inner)}**")
        elif kind == "U":
            out.append(f"<{inner}>")
        else:
            out.append(f"[{_escaped(label)}]({url})")
    out.append(_escaped(text[pos:]))
    return "".join(out)


def _quoted(text: str) -> str:
    """A string inside a list or dict, quoted as YAML would read it back."""
    if "'" not in text:
        return f"'{text}'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def yaml_value(value, top: bool = True) -> str:
    """A value in YAML's flow style, on one line; a string at the top is shown bare."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if top:
            return value if value else '""'
        return _quoted(value)
    if isinstance(value, dict):
        items = (
            f"{k if _PLAIN_KEY.match(str(k)) else _quoted(str(k))}: {yaml_value(v, False)}" for k, v in value.items()
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_value(v, False) for v in value) + "]"
    return str(value)


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _description(spec: dict) -> str:
    description = spec.get("description") or ""
    if isinstance(description, list):
        description = " ".join(str(part) for part in description)
    return markdown(" ".join(str(description).split()))


def _type(spec: dict) -> str:
    kind = str(spec.get("type") or "str")
    if kind == "list" and spec.get("elements"):
        kind = f"list of {spec['elements']}"
    if spec.get("choices"):
        kind += ", one of " + ", ".join(_code(yaml_value(choice)) for choice in spec["choices"])
    if spec.get("no_log"):
        kind += ", secret"
    return kind


def _rows(options: dict, defaults: dict | None, prefix: str = "") -> list[str]:
    """One row per option; suboptions follow their parent as parent.child, with the spec's defaults."""
    rows = []
    for name, spec in options.items():
        spec = spec or {}
        if spec.get("required"):
            default = REQUIRED
        elif defaults is not None:
            default = _code(yaml_value(defaults[name])) if name in defaults else NO_DEFAULT
        else:
            default = _code(yaml_value(spec["default"])) if "default" in spec else NO_DEFAULT
        cells = [_code(prefix + str(name)), _type(spec), default, _description(spec)]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
        if spec.get("options"):
            rows.extend(_rows(spec["options"], None, f"{prefix}{name}."))
    return rows


def render(entry: EntryPoint, page: Path, root: Path) -> list[str]:
    """The lines between an entry point's markers on `page` (a path under root)."""
    role_dir = os.path.relpath(root / "roles" / entry.role, page.parent)
    prefix = "" if role_dir == "." else f"{role_dir}/"
    spec_link = f"[{entry.role}/meta/argument_specs.yml]({prefix}meta/argument_specs.yml)"
    if entry.name == "main":
        source = f"from {spec_link}, defaults from [{entry.role}/defaults/main.yml]({prefix}defaults/main.yml)"
    else:
        source = f"from {spec_link}, defaults from the spec (the caller passes them)"
    what = markdown(entry.short_description.rstrip(".") + ".") if entry.short_description else ""
    lines = [
        f"Role `{entry.role}`, entry point `{entry.name}`: {what}".rstrip(),
        f"Generated by `make docs` {source}: edit those, not this table.",
        "",
    ]
    if not entry.options:
        return [*lines, "No variables.", ""]
    if entry.options_of_main:
        return [*lines, "The variables of the entry point `main`, checked when this one is included.", ""]
    return [
        *lines,
        "| variable | type | default | description |",
        "| --- | --- | --- | --- |",
        *_rows(entry.options, entry.defaults if entry.name == "main" else None),
        "",
    ]


# --- Pages ---


def find_pages(root: Path) -> list[Path]:
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted(root.glob("roles/*/README.md"))]
    return [page for page in pages if page.is_file()]


def find_blocks(lines: list[str], page_name: str) -> list[Block]:
    """The marker pairs of a page, in order, outside code blocks; a marker out of place raises DocsError."""
    blocks, open_at, open_key, fenced = [], None, None, False
    for number, line in enumerate(lines):
        stripped = line.strip()
        if _FENCE.match(line) and open_at is None:
            fenced = not fenced  # a marker shown in a code block is an example, not a block
        elif fenced:
            continue
        elif stripped.startswith(BEGIN):
            match = BEGIN_RE.match(stripped)
            if not match:
                raise DocsError(f"{page_name}:{number + 1}: write the marker as {BEGIN} <role> <entry point> -->")
            if open_at is not None:
                raise DocsError(f"{page_name}:{number + 1}: BEGIN VARIABLES before the END of line {open_at + 1}")
            open_at, open_key = number, match.groups()
        elif stripped == END:
            if open_at is None:
                raise DocsError(f"{page_name}:{number + 1}: END VARIABLES without a BEGIN")
            blocks.append(Block(open_key[0], open_key[1], open_at, number))
            open_at = None
    if open_at is not None:
        raise DocsError(f"{page_name}:{open_at + 1}: BEGIN VARIABLES {' '.join(open_key)} has no END VARIABLES")
    return blocks


def rewritten(lines: list[str], blocks: list[Block], entries: dict, page: Path, root: Path) -> list[str]:
    """The page's lines with every known block's content rendered anew (unknown blocks kept)."""
    out, last = [], 0
    for block in blocks:
        out.extend(lines[last : block.begin + 1])
        entry = entries.get((block.role, block.entry_point))
        out.extend(render(entry, page, root) if entry else lines[block.begin + 1 : block.end])
        last = block.end
    out.extend(lines[last:])
    return out


# --- Links ---

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, _CODE_SPAN.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def link_problems(page: Path, root: Path) -> list[str]:
    """Relative links of a page whose file, or whose heading in a Markdown file, is missing."""
    name = page.relative_to(root).as_posix()
    text = page.read_text()
    problems = []
    for number, line in _prose_lines(text):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path_part, _, fragment = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            if not resolved.exists():
                problems.append(f"{name}:{number}: link {target}: {path_part} does not exist")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved.read_text()):
                problems.append(f"{name}:{number}: link {target}: no heading #{fragment} in {path_part or name}")
    return problems


# --- The whole check ---


def run(root: Path, write: bool = False) -> tuple[list[str], list[str]]:
    """(problems, pages rewritten). With write, stale tables are rewritten instead of reported."""
    entries = {entry.key: entry for entry in load_entry_points(root)}
    roles = {role for role, _ in entries}
    problems, written, documented = [], [], {}
    for page in find_pages(root):
        name = page.relative_to(root).as_posix()
        text = page.read_text()
        lines = text.splitlines()
        try:
            blocks = find_blocks(lines, name)
        except DocsError as err:
            problems.append(str(err))
            continue
        for block in blocks:
            where = f"{name}:{block.begin + 1}"
            entry = entries.get((block.role, block.entry_point))
            if entry is None:
                spec = f"roles/{block.role}/meta/argument_specs.yml"
                missing = (
                    f"role {block.role} declares no entry point {block.entry_point} ({spec})"
                    if block.role in roles
                    else f"no role {block.role} has an argument spec ({spec})"
                )
                problems.append(f"{where}: {missing}: remove or rename the block")
                continue
            documented.setdefault(entry.key, []).append(name)
            if entry.internal and name != DESIGN_PAGE:
                problems.append(
                    f"{where}: role {entry.role} is internal (a short_description of its spec starts with"
                    f" {INTERNAL_PREFIX!r}): document entry point {entry.name} in {DESIGN_PAGE}, not on a user's page"
                )
            expected = render(entry, page, root)
            current = lines[block.begin + 1 : block.end]
            if current != expected and not write:
                problems.append(
                    f"{where}: the table of role {entry.role}, entry point {entry.name} is out of date"
                    f" with roles/{entry.role}: run make docs ({_first_difference(current, expected)})"
                )
        if write:
            new_lines = rewritten(lines, blocks, entries, page, root)
            if new_lines != lines:
                page.write_text("\n".join(new_lines) + "\n")
                written.append(name)
        if name == "README.md" or name.startswith("docs/"):
            problems.extend(link_problems(page, root))
    for key, entry in entries.items():
        if key not in documented:
            page = DESIGN_PAGE if entry.internal else "its operation's page under docs/"
            problems.append(
                f"role {entry.role}, entry point {entry.name} is documented on no page: add"
                f" '{BEGIN} {entry.role} {entry.name} -->' and '{END}' to {page}, then run make docs"
            )
    return problems, written


def _first_difference(old: list[str], new: list[str]) -> str:
    for old_line, new_line in zip(old, new, strict=False):
        if old_line != new_line:
            return f"first difference: {old_line.strip()[:60]!r} should read {new_line.strip()[:60]!r}"
    return f"it has {len(old)} lines where {len(new)} are due"


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables instead of checking them")
    args = parser.parse_args(argv)
    try:
        problems, written = run(root, write=args.write)
    except DocsError as err:
        problems, written = [str(err)], []
    for name in written:
        print(f"wrote {name}")
    for problem in problems:
        print(problem)
    if not problems and not args.write:
        print("variable tables match the argument specs; links resolve")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
