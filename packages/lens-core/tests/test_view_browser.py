"""The `lens view` report as a person sees it: opened in headless Chromium (Debian's),
its scripts waited for, the rendered page read back: each metric's chart with its points,
the span table's rows, the timeline's nesting, the logs linking to their spans."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lens_browser
import pytest
from lens_cli import run_lens
from lens_view_runs import Expected, two_rank_run

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = pytest.mark.browser

# Per chart card: its metric, its kind, and per drawn line its legend name and the markers
# Plotly drew (a null value draws none), read from the SVG.
READ_CHARTS = """
return [...document.querySelectorAll(".card[data-metric]")].map((card) => {
  const plot = card.querySelector('.plot[data-role="series"]');
  return {
    name: card.dataset.metric,
    kind: card.dataset.kind,
    drawn: plot.dataset.drawn === "true",
    lines: [...plot.querySelectorAll(".scatterlayer .trace")].map((trace) =>
      trace.querySelectorAll("path.point").length),
    legend: [...plot.querySelectorAll(".legendtext")].map((text) => text.textContent),
  };
});
"""
READ_SPAN_TABLE = """
return [...document.querySelectorAll("#span-table tbody tr")].map((row) =>
  [row.dataset.spanName, Number(row.children[1].textContent.replace(/,/g, ""))]);
"""
# The timeline's row labels from top to bottom, as drawn.
READ_TIMELINE = """
return [...document.querySelectorAll("#timeline-plot .ytick text")]
  .map((text) => [text.getBoundingClientRect().top, text.textContent])
  .sort((a, b) => a[0] - b[0])
  .map((pair) => pair[1]);
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """Headless Chromium at 1280 x 900 (lens_browser)."""
    with lens_browser.chromium_driver(lens_browser.browser_programs()) as driver:
        yield driver


def _open(driver: WebDriver, report: Path) -> None:
    """Load `report` from disk and wait until its script says every chart is drawn."""
    from selenium.webdriver.support.wait import WebDriverWait

    driver.get(report.as_uri())
    WebDriverWait(driver, lens_browser.BROWSER_TIMEOUT).until(
        lambda ready: ready.execute_script(
            "return document.documentElement.dataset.ready === 'true'"
        ),
        message=f"{report}: the page never finished drawing",
    )
    errors = driver.execute_script("return window.__lensErrors || []")
    assert errors == []


def _view(directory: Path, *files: Path) -> Path:
    out = directory / "report.html"
    result = run_lens("view", *(str(file) for file in files), "-o", str(out), cwd=directory)
    assert result.returncode == 0, result.stderr
    return out


def _charts(driver: WebDriver) -> dict[str, dict[str, Any]]:
    return {chart["name"]: chart for chart in driver.execute_script(READ_CHARTS)}


def _assert_charts_match(driver: WebDriver, expected: Expected) -> None:
    """Every metric of the file has a drawn chart with one line per series (three for a
    histogram) and the right number of markers on each."""
    charts = _charts(driver)
    assert set(charts) == set(expected.points)
    for name, chart in charts.items():
        assert chart["drawn"], name
        kind = expected.kinds[name]
        assert chart["kind"] == kind
        series = expected.series_points(name)
        if kind == "histogram":
            per_quantile = sorted(chart["lines"], reverse=True)
            intervals = expected.histogram_intervals(name)
            assert per_quantile == sorted([n for n in intervals for _ in range(3)], reverse=True)
        elif kind == "counter":
            # The rate view: a rate needs two points, so a series draws one marker fewer.
            assert sorted(chart["lines"], reverse=True) == [n - 1 for n in series], name
        else:
            assert sorted(chart["lines"], reverse=True) == series, name


def _assert_cumulative_toggle(driver: WebDriver, expected: Expected) -> None:
    """A counter's "cumulative" button redraws it with every point of each series."""
    from selenium.webdriver.common.by import By

    for name, kind in expected.kinds.items():
        if kind != "counter":
            continue
        card = driver.find_element(By.CSS_SELECTOR, f'.card[data-metric="{name}"]')
        card.find_element(By.CSS_SELECTOR, 'button[data-mode="total"]').click()
        lines = _charts(driver)[name]["lines"]
        assert sorted(lines, reverse=True) == expected.series_points(name)


def test_the_demo_report_draws_every_metric_and_span(browser: WebDriver, tmp_path: Path) -> None:
    """`lens demo` then `lens view lens-demo.jsonl`: a chart per demo metric with its points,
    the span table's counts, and a timeline whose steps sit under the job."""
    demo = run_lens("demo", "--steps", "6", "--interval", "0.05", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    demo_file = tmp_path / "lens-demo.jsonl"
    expected = Expected.of([demo_file])
    _open(browser, _view(tmp_path, demo_file))
    _assert_charts_match(browser, expected)
    _assert_cumulative_toggle(browser, expected)
    assert dict(browser.execute_script(READ_SPAN_TABLE)) == dict(expected.span_counts)
    labels = browser.execute_script(READ_TIMELINE)
    assert labels[:4] == [
        "lens_demo.job",
        "\u00b7 lens_demo.step",
        "\u00b7 \u00b7 lens_demo.generate",
        "\u00b7 \u00b7 lens_demo.train",
    ]
    assert labels.count("\u00b7 lens_demo.step") == 6


def test_a_two_rank_report_draws_metrics_spans_and_logs(browser: WebDriver, tmp_path: Path) -> None:
    """Two ranks' files in one report: both ranks' series on each chart, the span table,
    nested timeline rows, every log, and a log's link showing its span on the timeline."""
    from selenium.webdriver.common.by import By

    files = two_rank_run(tmp_path)
    expected = Expected.of(files)
    _open(browser, _view(tmp_path, *files))
    _assert_charts_match(browser, expected)
    legend = _charts(browser)["train.loss"]["legend"]
    assert Counter(text.split(",")[0] for text in legend) == {
        "trainer rank 0": 2,
        "trainer rank 1": 2,
    }
    assert dict(browser.execute_script(READ_SPAN_TABLE)) == dict(expected.span_counts)
    labels = browser.execute_script(READ_TIMELINE)
    step = labels.index("train.step")
    assert labels[step + 1 : step + 3] == ["\u00b7 train.forward", "\u00b7 \u00b7 train.attention"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#log-table tbody tr")
    assert len(rows) == expected.logs
    link = browser.find_elements(By.CSS_SELECTOR, "a.trace-link")[-1]
    span_id, trace_id = link.get_attribute("data-span"), link.get_attribute("data-trace")
    link.click()
    plot = browser.find_element(By.ID, "timeline-plot")
    assert plot.get_attribute("data-trace") == trace_id
    assert plot.get_attribute("data-highlight") == span_id


def test_an_empty_file_gives_a_page_that_says_so(browser: WebDriver, tmp_path: Path) -> None:
    """An empty file's report opens, finishes drawing and says there is nothing to show."""
    from selenium.webdriver.common.by import By

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    _open(browser, _view(tmp_path, empty))
    assert "empty" in browser.find_element(By.ID, "empty").text
