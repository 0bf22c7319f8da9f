#!/usr/bin/env python3
"""README.md and docs/ARCHITECTURE.md name only files and Swift types that exist.

    python3 scripts/docs-names.py              # check; exit 1 and one line per stale name
    python3 scripts/docs-names.py --self-test  # a fake doc with a missing file and a missing
                                               # type must be reported (the check can fail)

What is checked (stdlib only; run from any folder):
- Files. A path under a top-level folder of the repository (`Sources/StateSessions/Session.swift`,
  `Tests/TestSupport/`, `deploy/*.yaml`) must exist (globs may match anything). A bare file name
  of a source or script (`Session+Execution.swift`, `mhd_shim.c`, `cluster.sh`) must be the
  name of some file of the repository. Both anywhere in the text, code blocks included.
- Types. An inline code span outside fenced blocks that is a type-like name: an UpperCamelCase
  identifier (at least one lowercase letter and no `_`, so `MHD_NO`, `SIGTERM` and `F` are not),
  optionally with members, generic arguments and an argument list: `Session`,
  `HTTPServer.TLS`, `Session.submit(_:)`, `NowOrLater<ChangeOutcome, Never>`. The first name
  must be a type declared in the repository's Swift code (class, struct, enum, protocol, actor,
  typealias, associatedtype; an `extension` declares nothing), a target or a product of
  Package.swift, or one of EXTERNAL below. Each member after a name of ours must be declared
  somewhere in the Swift code (a func, var, let, case, nested type...): a member that was
  renamed is as stale as a type. Members of an EXTERNAL name are not checked.
"""

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "docs/ARCHITECTURE.md"]

# Folders a path in the docs may start with (the repository's top level).
TOP_LEVEL = ["Sources", "Tests", "Examples", "scripts", "bench", "fuzz", "deploy", "config",
             "docs", "tests-faults"]
# Extensions of a bare file name that must be a file of the repository.
SOURCE_EXTENSIONS = ["swift", "c", "h", "sh", "py"]
# Folders never searched (build products, caches, VCS).
SKIPPED_FOLDERS = {".build", ".build-release", ".git", ".cache", "node_modules", ".venv",
                   "__pycache__", "test-artifacts", "data"}

# Names the docs use that are declared outside this repository. Keep it short: a name of ours
# that is gone must not hide here.
EXTERNAL = {
    # Swift standard library, Synchronization, Dispatch, Swift Testing
    "Codable", "Decoder", "Encoder", "Sendable", "Never", "Result", "Int", "String", "Array",
    "Mutex", "Synchronization", "Dispatch", "AsyncSequence", "ContinuousClock", "Task",
    "Testing",
    # Foundation
    "Foundation", "FoundationNetworking", "URLSession", "URLSessionDataDelegate",
    "JSONSerialization", "JSONDecoder", "JSONEncoder",
    # swift-log, swift-service-lifecycle, swift-configuration, swift-metrics
    "Logger", "ServiceGroup", "Service", "LookupResult",
    # swift-nio, postgres-nio, async-http-client
    "SwiftNIO", "PostgresNIO", "AsyncHTTPClient",
    # the browser's
    "EventSource",
}
# Words in code spans that look like types and are not: HTTP header and file names, JSON's.
NOT_TYPES = {
    "ETag", "Host", "Authorization", "Origin", "Vary", "Location",
    "Makefile", "Dockerfile",
    "NaN",
}
# File extensions: `Package.swift` in a code span is a file (checked as one), not a member.
FILE_EXTENSIONS = set(SOURCE_EXTENSIONS) | {"md", "json", "yaml", "yml", "html", "js", "txt"}


def repository_files(root):
    """Every file and folder of the repository, relative to root ('/'-separated)."""
    files, folders = set(), set()
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [s for s in subfolders if s not in SKIPPED_FOLDERS]
        relative = os.path.relpath(folder, root)
        if relative != ".":
            folders.add(relative.replace(os.sep, "/"))
        for name in names:
            files.add(os.path.normpath(os.path.join(relative, name)).replace(os.sep, "/"))
    return files, folders


def strip_comments(source):
    """Swift source without // and /* */ comments (string contents are kept as they are)."""
    source = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)
    return re.sub(r"//[^\n]*", "", source)


TYPE_DECLARATION = re.compile(
    r"\b(?:class|struct|enum|protocol|actor|typealias|associatedtype)\s+([A-Za-z_]\w*)")
MEMBER_DECLARATION = re.compile(r"\b(?:func|var|let|init|subscript)\s+`?([A-Za-z_]\w*)")
CASE_LIST = re.compile(r"^\s*(?:(?:public|package|internal|indirect)\s+)*case\s+([^\n]*)", re.M)


def swift_declarations(files):
    """(types, members): names declared in the repository's Swift code."""
    types, members = set(), set()
    for path in files:
        if not path.endswith(".swift"):
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            source = strip_comments(f.read())
        types.update(TYPE_DECLARATION.findall(source))
        members.update(MEMBER_DECLARATION.findall(source))
        # `case a, b(Int), c` of an enum: every item's leading name (a switch's `case .x:`
        # starts with a dot and adds nothing).
        for items in CASE_LIST.findall(source):
            depth, item, raw_value = 0, "", False
            for ch in items + ",":
                if depth == 0 and ch in ":{":
                    break  # a switch's pattern ends here
                if depth == 0 and ch == "=":
                    raw_value = True  # `case a = "a", b`: skip to the next item
                if raw_value and not (ch == "," and depth == 0):
                    continue
                raw_value = False
                if ch in "([<":
                    depth += 1
                elif ch in ")]>":
                    depth -= 1
                if ch == "," and depth == 0:
                    m = re.match(r"\s*`?([A-Za-z_]\w*)", item)
                    if m:
                        members.add(m.group(1))
                    item = ""
                else:
                    item += ch
            m = re.match(r"\s*`?([A-Za-z_]\w*)", item)
            if m and depth == 0:
                members.add(m.group(1))
    members.add("init")
    return types, members | types


def package_names():
    """Targets and products of Package.swift (module names are fine in the docs)."""
    with open(os.path.join(ROOT, "Package.swift"), encoding="utf-8") as f:
        text = f.read()
    return set(re.findall(r'name:\s*"([^"]+)"', text))


def without_fences(text):
    """The text with every fenced block's lines blanked (line numbers kept)."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return "\n".join(lines)


PATH = re.compile(r"(?<![\w/.+-])((?:%s)/[\w+./*-]*)" % "|".join(re.escape(t) for t in TOP_LEVEL))
BARE_FILE = re.compile(r"(?<![\w/.+-])([A-Za-z_][\w+-]*(?:\.[\w+-]+)*\.(?:%s))(?![\w/])"
                       % "|".join(SOURCE_EXTENSIONS))
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
TYPE_SPAN = re.compile(r"^([A-Z][A-Za-z0-9]*)((?:\.%s)*)(<[^<>`]*>)?(\([^()`]*\))?$" % IDENTIFIER)
UPPER_CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def type_like(name):
    return bool(UPPER_CAMEL.match(name)) and any(c.islower() for c in name)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def check_text(doc, text, files, folders, types, members, modules):
    """[(doc, line, message)] for every name of `text` that does not exist."""
    problems = []
    basenames = {p.rsplit("/", 1)[-1] for p in files}

    def exists(path):
        path = path.rstrip("/")
        if any(ch in path for ch in "*?["):
            return bool(glob.glob(os.path.join(ROOT, path)))
        return path in files or path in folders

    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".,;:")
        if path.endswith("/..") or not path.strip("/"):
            continue
        if not exists(path):
            problems.append((doc, line_of(text, m.start()), "no file or folder `%s`" % path))
    for m in BARE_FILE.finditer(text):
        if m.group(1) not in basenames:
            problems.append((doc, line_of(text, m.start()), "no file named `%s`" % m.group(1)))

    known_types = types | modules | EXTERNAL | NOT_TYPES | basenames
    prose = without_fences(text)
    for m in re.finditer(r"`([^`\n]+(?:\n[^`\n]+)?)`", prose):
        span = " ".join(m.group(1).split())
        shape = TYPE_SPAN.match(span)
        if not shape:
            continue
        first = shape.group(1)
        chain = [c for c in shape.group(2).split(".") if c]
        if not type_like(first) or first in NOT_TYPES:
            continue
        if chain and chain[-1] in FILE_EXTENSIONS:
            continue  # `Package.swift`: a file, checked above
        line = line_of(prose, m.start())
        if first not in known_types:
            problems.append((doc, line, "no type `%s` (in `%s`)" % (first, span)))
            continue
        generic = shape.group(3) or ""
        for argument in re.findall(r"[A-Za-z_]\w*", generic):
            if type_like(argument) and argument not in known_types:
                problems.append((doc, line, "no type `%s` (in `%s`)" % (argument, span)))
        if first in EXTERNAL:
            continue
        for member in chain:
            if member in EXTERNAL:
                break
            if member not in members:
                problems.append((doc, line, "no member `%s` declared (in `%s`)" % (member, span)))
                break
    return problems


def check(docs_and_texts):
    files, folders = repository_files(ROOT)
    types, members = swift_declarations(files)
    modules = package_names() | {f.split("/")[1] for f in folders
                                 if f.count("/") == 1 and f.split("/")[0] in ("Sources", "Tests")}
    problems = []
    for doc, text in docs_and_texts:
        problems += check_text(doc, text, files, folders, types, members, modules)
    return problems


def self_test():
    fake = "\n".join([
        "# A fake doc",
        "Real: `JSONParser`, `HTTPServer.TLS`, `NowOrLater<HTTPResponse, Never>`, `Mutex`,",
        "Sources/StateJSON/JSONParser.swift, `Package.swift`, mhd_shim.c, `ETag`.",
        "Missing: Sources/StateSessions/NoSuchFile.swift and NoSuchThing+Stuff.swift,",
        "the type `NoSuchTypeAnywhere`, the member `JSONParser.noSuchMemberAnywhere(_:)`.",
        "```swift",
        "let x = `FencedTypesAreNotChecked`",
        "```",
    ])
    problems = check([("fake.md", fake)])
    expected = [
        (4, "Sources/StateSessions/NoSuchFile.swift"),
        (4, "NoSuchThing+Stuff.swift"),
        (5, "NoSuchTypeAnywhere"),
        (5, "noSuchMemberAnywhere"),
    ]
    failures = []
    for line, name in expected:
        if not any(p[1] == line and "`%s`" % name in p[2] for p in problems):
            failures.append("not reported: %s (line %d)" % (name, line))
    for p in problems:
        if not any(p[1] == line and "`%s`" % name in p[2] for line, name in expected):
            failures.append("reported but exists: %s:%d: %s" % p)
    for failure in failures:
        print("docs-names self-test: " + failure)
    if failures:
        return 1
    print("docs-names self-test: %d missing names reported, nothing else" % len(expected))
    return 0


def main(arguments):
    if arguments == ["--self-test"]:
        return self_test()
    if arguments:
        print(__doc__.strip().split("\n\n")[1])
        return 2
    texts = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            texts.append((doc, f.read()))
    problems = check(texts)
    for doc, line, message in problems:
        print("%s:%d: %s" % (doc, line, message))
    if problems:
        print("docs-names: %d stale names in %s" % (len(problems), " and ".join(DOCS)))
        return 1
    print("docs-names: every file and type named in %s exists" % " and ".join(DOCS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
