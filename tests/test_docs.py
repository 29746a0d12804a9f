"""The documentation a newcomer reads: the README's two commands, and code that works and fits.

The docs site is `mkdocs build --strict` in the `docs` session; these checks cover what that
build does not: that each Python example at least parses, and that code fits the page column
instead of scrolling sideways or running under the copy button (console and text output,
which is what a command printed, may). The static check counts characters against COLUMN;
the rendered check builds the site and measures every code block of every page in headless
Chromium at each size in WINDOWS. The `docs` session runs both; without mkdocs, selenium or
Chromium the rendered check skips, unless LENS_TEST_REQUIRE lists chromium (`.ci/run`), where
a missing Chromium fails it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import html
import http.server
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import lens_browser
import pytest
from lens_integrations import require
from lens_markdown import code_blocks

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
SITE_PAGES = sorted((REPOSITORY / "docs").glob("*.md"))
PAGES = sorted(
    [
        REPOSITORY / "README.md",
        *SITE_PAGES,
        *(REPOSITORY / "packages").glob("*/README.md"),
    ]
)
# The widest code line the docs site shows in a 1280-pixel-wide window without a scroll bar
# and clear of the copy button. Beside Material's two sidebars (and a 15-pixel page scroll
# bar) a code block is 733 pixels wide there; less its paddings, the right one widened by
# docs/stylesheets/extra.css to keep the button's corner free on every line, 682 pixels
# hold 83 characters of 13.6-pixel monospace. test_a_column_wide_line_fits_the_rendered_page
# measures it in headless Chromium, at each size in WINDOWS.
COLUMN = 83
# Blocks that show what a program printed, not code to read or paste.
OUTPUT_LANGUAGES = frozenset({"console", "text"})


def _page_id(page: pathlib.Path) -> str:
    return page.relative_to(REPOSITORY).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_python_example_parses(page: pathlib.Path) -> None:
    """Each ```python block of the page is valid Python (a typo in an example fails here)."""
    broken = []
    for start, language, body in code_blocks(page):
        if language != "python":
            continue
        try:
            ast.parse("\n".join(body))
        except SyntaxError as exc:
            broken.append(f"line {start + (exc.lineno or 1) - 1}: {exc.msg}")
    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_code_lines_fit_the_column(page: pathlib.Path) -> None:
    """No line of code to read or paste is wider than the page column."""
    too_wide = [
        f"line {start + offset}: {len(line)} characters"
        for start, language, body in code_blocks(page)
        if language not in OUTPUT_LANGUAGES
        for offset, line in enumerate(body)
        if len(line) > COLUMN
    ]
    assert too_wide == []


def test_readme_starts_with_the_demo_and_the_test_command() -> None:
    """The README's first code block runs the demo; the block under the test-command
    marker (what .ci/run executes) runs nox; the demo comes first."""
    readme = REPOSITORY / "README.md"
    text = readme.read_text(encoding="utf-8")
    blocks = code_blocks(readme)
    first = "\n".join(blocks[0][2])
    assert "lens demo" in first
    marker = text.index("<!-- test-command -->")
    after_marker = [body for start, _, body in blocks if start > text[:marker].count("\n") + 1]
    assert "nox" in after_marker[0][0]
    assert text.index("lens demo") < marker


# --- the rendered site ----------------------------------------------------------------------

# Browser windows the rendered check uses (width, height): a common laptop width, just above
# the 1220 pixels from which Material shows both sidebars beside the page, and a wider one.
WINDOWS = ((1280, 900), (1440, 900))
# Seconds: the whole `mkdocs build` (any one browser command: lens_browser.BROWSER_TIMEOUT).
BUILD_TIMEOUT = 180
# The copy button: Material 9.7+ puts its buttons in `.md-code__nav`, earlier releases place
# a lone `.md-clipboard`; either sits absolutely in the block's top right corner.
BUTTONS = ".md-code__nav, .md-clipboard"
# True once the page has loaded, its fonts have settled and Material's script has given each
# code block its copy button.
PAGE_READY = f"""
return document.readyState === "complete" && document.fonts.status === "loaded"
    && [...document.querySelectorAll(".md-typeset pre > code")]
        .every((code) => code.parentElement.querySelector({BUTTONS!r}) !== null);
"""
# For each code block of the page, in document order: its text and language, where it
# comes from, its widths, how far each line's text reaches, which words the copy button
# covers and how wide a COLUMN-character line of its font is. Figures are CSS pixels.
MEASURE_BLOCKS = f"""
const column = arguments[0];
const intersect = (a, b) => ({{
  left: Math.max(a.left, b.left), right: Math.min(a.right, b.right),
  top: Math.max(a.top, b.top), bottom: Math.min(a.bottom, b.bottom),
}});
const isEmpty = (box) => box.left >= box.right || box.top >= box.bottom;
return [...document.querySelectorAll(".md-typeset pre > code")].map((code) => {{
  const wrapper = code.closest(".highlight");
  const language = [...(wrapper ? wrapper.classList : [])]
    .filter((name) => name.startsWith("language-"))
    .map((name) => name.slice("language-".length))[0] || "";
  const style = getComputedStyle(code);
  const frame = code.getBoundingClientRect();
  const left = frame.left + code.clientLeft;
  const top = frame.top + code.clientTop;
  const shown = {{left, top, right: left + code.clientWidth, bottom: top + code.clientHeight}};
  const textLeft = left + parseFloat(style.paddingLeft);
  const buttons = [...code.parentElement.querySelectorAll({BUTTONS!r})]
    .map((button) => button.getBoundingClientRect())
    .filter((box) => box.width > 0 && box.height > 0);
  const reach = new Map();
  const covered = [];
  const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  let line = 1;
  for (let node = walker.nextNode(); node !== null; node = walker.nextNode()) {{
    for (const word of node.data.matchAll(/\\n|\\S+/g)) {{
      if (word[0] === "\\n") {{
        line += 1;
        continue;
      }}
      const range = document.createRange();
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      for (const box of range.getClientRects()) {{
        reach.set(line, Math.max(reach.get(line) || 0, box.right - textLeft));
        const visible = intersect(box, shown);
        if (!isEmpty(visible) && buttons.some((button) => !isEmpty(intersect(visible, button)))) {{
          covered.push([line, word[0]]);
        }}
      }}
    }}
  }}
  const probe = document.createElement("span");
  probe.textContent = "0".repeat(column);
  code.append(probe);
  const columnWidth = probe.getBoundingClientRect().width;
  probe.remove();
  return {{
    text: code.textContent,
    language,
    from_docstring: code.closest(".doc") !== null,
    top_level: wrapper !== null && wrapper.parentElement.matches("article.md-typeset"),
    scroll_width: code.scrollWidth,
    client_width: code.clientWidth,
    text_width: code.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
    button_room: buttons.length ? Math.min(...buttons.map((box) => box.left)) - textLeft : null,
    reach: [...reach.entries()],
    covered,
    column_width: columnWidth,
  }};
}});
"""


@dataclasses.dataclass(frozen=True)
class RenderedBlock:
    """One code block of the built site as the browser laid it out (CSS pixels)."""

    page: str  # the Markdown page, docs/cli.md
    where: str  # "docs/cli.md:112" (its first line), or "docs/api.md, code block 7"
    lines: tuple[str, ...]  # the block's text, one entry a line
    first_line: int | None  # the Markdown line of lines[0], when known
    language: str
    top_level: bool  # directly in the page's column (not in a list, admonition, API entry)
    scroll_width: int
    client_width: int
    text_width: float  # the room for text between the block's paddings
    button_room: float | None  # from the text's left edge to the copy button's
    reach: dict[int, float]  # line of the block (from 1) -> where its text ends
    covered: tuple[tuple[int, str], ...]  # (line, word) under the copy button
    column_width: float  # a line of COLUMN characters in the block's font

    @property
    def room(self) -> float:
        """The width a line may take: to the right padding, and not under the button."""
        if self.button_room is None:
            return self.text_width
        return min(self.text_width, self.button_room)

    def line_name(self, line: int) -> str:
        """`line` of the block (from 1) as a Markdown line, docs/cli.md:113, when known."""
        if self.first_line is None:
            return f"{self.where}, line {line}"
        return f"{self.page}:{self.first_line + line - 1}"

    def too_wide(self) -> list[str]:
        """Each line whose text runs past the room there is, with its width and length."""
        return [
            f"{self.line_name(line)}: {len(self.lines[line - 1])} characters, {reach:.0f} px"
            f" of the {self.text_width:.0f} px there is"
            for line, reach in sorted(self.reach.items())
            if reach > self.text_width + 0.5
        ]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the built site without a log line per request."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def browser_programs() -> tuple[str, str]:
    """Debian's chromium and chromedriver, with mkdocs and selenium to use them (skipped or
    failed as lens_browser.browser_programs says)."""
    require("mkdocs")
    return lens_browser.browser_programs()


@pytest.fixture(scope="module")
def site(built_site: pathlib.Path, browser_programs: tuple[str, str]) -> pathlib.Path:
    """The docs site, for the browser (which it waits for, so no build is wasted)."""
    return built_site


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The docs site, built as the `docs` session builds it (`mkdocs build --strict`)."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the docs session installs it)")
    site_dir = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=REPOSITORY,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if build.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{build.stdout}{build.stderr}")
    return site_dir


@pytest.fixture(scope="module")
def site_url(site: pathlib.Path) -> Iterator[str]:
    """The built site, served over HTTP on 127.0.0.1 from a thread of this process."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=lens_browser.BROWSER_TIMEOUT)


@pytest.fixture(scope="module")
def browser(browser_programs: tuple[str, str]) -> Iterator[WebDriver]:
    """Headless Chromium driven through Debian's chromedriver (lens_browser)."""
    with lens_browser.chromium_driver(browser_programs) as driver:
        yield driver


def _page_url(page: pathlib.Path) -> str:
    """The path of `page`'s built page under the site's root (mkdocs' directory URLs)."""
    return "" if page.stem == "index" else f"{page.stem}/"


def _measure_page(driver: WebDriver, url: str, page: pathlib.Path) -> list[RenderedBlock]:
    """Every code block of `page`, served at `url`, as `driver`'s window lays it out."""
    from selenium.webdriver.support.wait import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, lens_browser.BROWSER_TIMEOUT).until(
        lambda ready: ready.execute_script(PAGE_READY),
        message=f"{url}: Material's script gave not every code block a copy button",
    )
    found: list[dict[str, Any]] = driver.execute_script(MEASURE_BLOCKS, COLUMN)
    # The page's own fences come in document order among the blocks that are not part of
    # an API entry (mkdocstrings' `.doc`), so each of those is named by its Markdown line.
    fences = [start for start, _, _ in code_blocks(page)]
    from_page = [index for index, block in enumerate(found) if not block["from_docstring"]]
    first_lines: dict[int, int] = {}
    if len(from_page) == len(fences):
        first_lines = dict(zip(from_page, fences, strict=True))
    name = page.relative_to(REPOSITORY).as_posix()
    blocks = []
    for index, block in enumerate(found):
        first_line = first_lines.get(index)
        where = f"{name}:{first_line}" if first_line else f"{name}, code block {index + 1}"
        blocks.append(
            RenderedBlock(
                page=name,
                where=where,
                lines=tuple(block["text"].split("\n")),
                first_line=first_line,
                language=block["language"],
                top_level=block["top_level"],
                scroll_width=block["scroll_width"],
                client_width=block["client_width"],
                text_width=block["text_width"],
                button_room=block["button_room"],
                reach={int(line): float(right) for line, right in block["reach"]},
                covered=tuple((int(line), str(word)) for line, word in block["covered"]),
                column_width=block["column_width"],
            )
        )
    return blocks


@pytest.fixture(scope="module")
def layouts(
    site: pathlib.Path, site_url: str, browser: WebDriver
) -> Callable[[tuple[int, int]], list[RenderedBlock]]:
    """Every code block to read or paste on every page of the site, as a browser window of
    a given size lays it out; each size is measured once per module (however pytest-randomly
    orders the tests)."""
    measured: dict[tuple[int, int], list[RenderedBlock]] = {}

    def layout(size: tuple[int, int]) -> list[RenderedBlock]:
        if size not in measured:
            browser.set_window_size(*size)
            blocks = []
            for page in SITE_PAGES:
                built = site / _page_url(page) / "index.html"
                assert built.is_file(), f"mkdocs built no {built.relative_to(site)}"
                blocks += _measure_page(browser, site_url + _page_url(page), page)
            measured[size] = [block for block in blocks if block.language not in OUTPUT_LANGUAGES]
        return measured[size]

    return layout


@pytest.fixture(params=WINDOWS, ids=lambda size: f"{size[0]}x{size[1]}")
def rendered(
    request: pytest.FixtureRequest, layouts: Callable[[tuple[int, int]], list[RenderedBlock]]
) -> list[RenderedBlock]:
    """The site's code blocks to read or paste, in a browser window of one size in WINDOWS."""
    return layouts(request.param)


def test_no_code_block_scrolls_sideways(rendered: list[RenderedBlock]) -> None:
    """Every line of code to read or paste fits its block, which never scrolls sideways."""
    overflowing = [
        f"{block.where} ({block.scroll_width} px wide in {block.client_width} px): "
        + "; ".join(block.too_wide() or ["its padding"])
        for block in rendered
        if block.scroll_width > block.client_width
    ]
    assert not overflowing, "scrolls sideways:\n" + "\n".join(overflowing)


def test_the_copy_button_covers_no_code(rendered: list[RenderedBlock]) -> None:
    """The copy button in a code block's corner lies over none of the text shown there."""
    covered = [
        f"{block.line_name(line)}: {word!r}" for block in rendered for line, word in block.covered
    ]
    assert not covered, "under the copy button:\n" + "\n".join(covered)


def test_a_column_wide_line_fits_the_rendered_page(rendered: list[RenderedBlock]) -> None:
    """A line of COLUMN characters (the static check's limit) fits beside the copy button."""
    in_the_column = [block for block in rendered if block.top_level]
    assert in_the_column, "no code block stands directly in a page's column"
    too_narrow = {
        f"{block.page}: {COLUMN} characters take {block.column_width:.1f} px, the column"
        f" has {block.room:.1f} px"
        for block in in_the_column
        if block.column_width > block.room
    }
    assert not too_narrow, "\n".join(sorted(too_narrow))


def _page_text(site: pathlib.Path, page: str) -> str:
    """The visible text of a built page (tags dropped, entities decoded)."""
    markup = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_the_api_page_shows_the_call_a_consumer_makes(built_site: pathlib.Path) -> None:
    """NemoLensConfig's signature shows the default service name by value and no private
    field; a documented private keyword (`_allow_reinit`) stays; docstrings' references to
    other pages are links, not literal `docs/....md` text."""
    text = _page_text(built_site, "api")
    signature = re.search(r"NemoLensConfig\((.*?)\)", text, re.DOTALL)
    assert signature is not None
    assert 'service_name: str = "nemo"' in " ".join(signature[1].split())
    for hidden in ("DEFAULT_SERVICE_NAME", "_span_group_cls", "_env_sources"):
        assert hidden not in text
    assert "_allow_reinit" in text
    assert re.findall(r"docs/[\w-]+\.md", text) == []
    markup = (built_site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'href="../configuration/#fields-and-their-variables"' in markup
    assert 'href="../exporters/#forked-children"' in markup


# The public API: each public module's __all__ is what docs/api.md renders (mkdocstrings'
# "public" filter follows __all__). Read from the source with ast, so the docs session,
# which installs no lens, runs these too.
SOURCE = REPOSITORY / "packages" / "lens-core" / "src"
API_PAGE = REPOSITORY / "docs" / "api.md"
# Undocumented attributes consumers already use, kept on purpose (spec, "Private names that
# consumer tests already touch"): Gym's tests patch `nemo.lens.helpers.trace.get_tracer`, and
# `is_span_group_enabled` was importable from helpers before it moved to state.
KEPT_FOR_CONSUMERS = {"nemo.lens.helpers": {"trace", "is_span_group_enabled"}}


def _module_path(module: str) -> pathlib.Path:
    path = SOURCE.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _documented_modules() -> dict[str, tuple[str, ...] | None]:
    """Each `::: target` of docs/api.md by module: None for the whole module, else the
    names a block documents (`::: nemo.lens.get_tracer`, or `options: members:`)."""
    documented: dict[str, tuple[str, ...] | None] = {}
    text = API_PAGE.read_text(encoding="utf-8")
    for target, options in re.findall(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, re.MULTILINE):
        members = re.search(r"members: \[([^\]]*)\]", options)
        if _module_path(target).exists() and members is None:
            documented[target] = None
            continue
        module, _, name = target.rpartition(".")
        if members is not None:
            module, names = target, tuple(m.strip() for m in members[1].split(","))
        else:
            names = (name,)
        if documented.get(module, ()) is not None:
            documented[module] = (*(documented.get(module) or ()), *names)
    return documented


def _public_modules() -> list[str]:
    """Every module of lens-core whose dotted path has no underscore part."""
    modules = []
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if not any(part.startswith("_") for part in parts):
            modules.append(".".join(parts))
    return modules


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The module's top-level statements, looking into `if` and `try` blocks."""
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        yield node
        if isinstance(node, ast.If):
            pending[:0] = [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending[:0] = [*node.body, *node.orelse, *node.finalbody]
            pending[:0] = [s for handler in node.handlers for s in handler.body]


def _public_names(module: str) -> tuple[tuple[str, ...] | None, set[str]]:
    """(`__all__`, the names `module` defines or re-exports without an underscore).

    Defined: a def, a class or an assignment. Re-exported: `from x import name as name`,
    the explicit re-export spelling; a plain import is the module's own business."""
    tree = ast.parse(_module_path(module).read_text(encoding="utf-8"))
    declared: tuple[str, ...] | None = None
    names: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == "__all__":
                    declared = tuple(ast.literal_eval(node.value))  # type: ignore[arg-type]
                elif isinstance(target, ast.Name):
                    names.add(target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names if alias.asname == alias.name)
    return declared, {name for name in names if not name.startswith("_")}


def test_every_public_module_is_on_the_api_page() -> None:
    """A module consumers can import by a public path is documented, unless it defines
    nothing public (version.py holds only `__version__`, which the root documents)."""
    documented = _documented_modules()
    missing = [
        module
        for module in _public_modules()
        if module not in documented and (_public_names(module)[0] or _public_names(module)[1])
    ]
    assert missing == [], "not on the API page: " + ", ".join(missing)


@pytest.mark.parametrize("module", sorted(_documented_modules()))
def test_a_public_module_exports_exactly_its_documented_api(module: str) -> None:
    """`__all__` is sorted and lists everything the module defines for consumers; all else
    it defines has an underscore name. A block naming members names only `__all__`'s."""
    declared, public = _public_names(module)
    assert declared is not None, f"{module} declares no __all__"
    assert list(declared) == sorted(declared), f"{module}.__all__ is not sorted"
    undeclared = sorted(public - set(declared) - KEPT_FOR_CONSUMERS.get(module, set()))
    assert undeclared == [], f"{module}: public-looking names outside __all__ (add or rename)"
    assert set(_documented_modules()[module] or ()) <= set(declared)


def test_the_api_page_documents_every_name_of_every_all(built_site: pathlib.Path) -> None:
    """Each name of each documented `__all__` has its heading on the built API page: under
    its module, or, for a module documented in part (the package root, whose re-exports are
    documented where they are defined), under any module of the page. `__version__` is
    described in the root's prose."""
    markup = (built_site / "api" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="(nemo\.lens[\w.]*)"', markup))
    anchored_names = {anchor.rpartition(".")[2] for anchor in anchors}
    missing = []
    for module, members in _documented_modules().items():
        for name in _public_names(module)[0] or ():
            if name.startswith("__"):
                continue
            whole = members is None
            if f"{module}.{name}" not in anchors and (whole or name not in anchored_names):
                missing.append(f"{module}.{name}")
    assert missing == [], "not on the API page: " + ", ".join(missing)
