// The `lens view` page: draws the report's data (the JSON block above) with Plotly.
// Every text from the files goes into the page as text (textContent), never as markup;
// Plotly's labels get it escaped. Charts are drawn one after another so the page shows at
// once; when the last is drawn, <html data-ready="true"> says so (the browser test waits).
(function () {
  "use strict";

  // What went wrong while drawing, for whoever reads the page back (the browser test).
  window.__lensErrors = [];
  window.addEventListener("error", (event) => window.__lensErrors.push(String(event.message)));
  const data = JSON.parse(document.getElementById("lens-report-data").textContent);
  const CONFIG = {
    displaylogo: false,
    responsive: true,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d", "toggleSpikelines"],
  };
  // A series with more points than this is drawn as a line alone (markers would hide it).
  const MARKERS_UP_TO = 300;
  const ROW_PX = 22;
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const queue = [];

  // --- small helpers ----------------------------------------------------------------------

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, String(value));
      else if (key === "title") node.title = value;
      else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // Plotly reads a subset of HTML in labels and hover text: escape what came from a file.
  function plain(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function number(value, digits) {
    if (value === null || value === undefined) return "\u2013";
    const magnitude = Math.abs(value);
    if (magnitude !== 0 && (magnitude >= 1e7 || magnitude < 1e-3)) return value.toExponential(3);
    return value.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 3 : digits });
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return "\u2013";
    if (ms >= 1000) return number(ms / 1000, 2) + " s";
    if (ms >= 1) return number(ms, 1) + " ms";
    return number(ms * 1000, 1) + " \u00b5s";
  }

  function clock(ms) {
    const date = new Date(ms);
    if (Number.isNaN(date.getTime())) return "\u2013"; // past what a Date holds
    return date.toISOString().replace("T", " ").replace("Z", " UTC");
  }

  function attributeText(attributes) {
    return Object.entries(attributes || {}).map(([key, value]) => key + " = " + value);
  }

  function attributeLines(attributes) {
    return attributeText(attributes).map(plain);
  }

  function plot(node, traces, layout) {
    queue.push(() =>
      Plotly.newPlot(node, traces, layout, CONFIG).then(() => node.setAttribute("data-drawn", "true"))
    );
  }

  function baseLayout(extra) {
    return Object.assign(
      {
        height: 300,
        margin: { l: 60, r: 16, t: 8, b: 40 },
        legend: { orientation: "h", y: -0.15, yanchor: "top", font: { size: 11 } },
        hovermode: "closest",
        font: { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12 },
      },
      extra
    );
  }

  // --- header -------------------------------------------------------------------------------

  function header() {
    const c = data.counts;
    const services = [...new Set(data.sources.map((s) => s.service))];
    const ranks = [...new Set(data.sources.map((s) => s.rank).filter((r) => r !== ""))];
    const hosts = [...new Set(data.sources.map((s) => s.host).filter((h) => h !== ""))];
    const facts = [
      ["files", data.files.join(", ")],
      ["services", services.join(", ") || "\u2013"],
      ["ranks", ranks.join(", ") || "\u2013"],
      ["hosts", hosts.join(", ") || "\u2013"],
      ["time range (UTC)", data.startMs === null ? "\u2013" : clock(data.startMs) + " \u2192 " + clock(data.endMs)
        + " (" + duration(data.endMs - data.startMs) + ")"],
      ["metric points", number(c.points, 0) + " in " + number(c.metrics, 0) + " metrics"],
      ["spans", number(c.spans, 0)],
      ["logs", number(c.logs, 0)],
      ["skipped as malformed", number(c.skippedLines, 0) + " lines of " + number(c.lines, 0)
        + ", " + number(c.skippedRecords, 0) + " records"],
    ];
    const list = el("dl", { class: "facts", id: "facts" });
    for (const [name, value] of facts) {
      list.append(el("dt", {}, name), el("dd", { "data-fact": name }, value));
    }
    const header = document.getElementById("header");
    header.append(list);
    if (data.skippedExamples.length) {
      header.append(el("p", { class: "note" }, "First lines skipped: " + data.skippedExamples.join("; ")));
    }
    if (c.lines === 0) {
      header.append(el("p", { class: "empty", id: "empty" }, "The file is empty: there is nothing to show."));
    } else if (c.points + c.spans + c.logs === 0) {
      header.append(el("p", { class: "empty", id: "empty" },
        "No metrics, spans or logs were found: every line was skipped or held no records."));
    }
  }

  // --- metrics ------------------------------------------------------------------------------

  function group(name) {
    const dot = name.indexOf(".");
    return dot > 0 ? name.slice(0, dot) : name;
  }

  function scatter(series, y, name, extra) {
    return Object.assign(
      {
        type: "scatter",
        x: series.t,
        y: y,
        name: plain(name),
        mode: series.t.length <= MARKERS_UP_TO ? "lines+markers" : "lines",
        connectgaps: false,
        hovertemplate: "%{x}<br>%{y}<extra>" + plain(name) + "</extra>",
      },
      extra
    );
  }

  function metricTraces(metric, mode) {
    if (metric.kind === "histogram" || metric.kind === "summary") {
      // One colour per series, one dash per quantile: a series' three lines read as one.
      const dash = { p50: "solid", p90: "dash", p99: "dot" };
      const traces = [];
      metric.series.forEach((series, index) => {
        const colour = PALETTE[index % PALETTE.length];
        for (const q of ["p50", "p90", "p99"]) {
          traces.push(scatter(series, series[q], series.label + " " + q, {
            legendgroup: "s" + index,
            line: { dash: dash[q], color: colour },
            marker: { color: colour },
          }));
        }
      });
      return traces;
    }
    if (metric.kind === "counter") {
      return metric.series.map((series) => scatter(series, series[mode], series.label));
    }
    return metric.series.map((series) => scatter(series, series.value, series.label));
  }

  function yTitle(metric, mode) {
    const unit = metric.unit || "";
    if (metric.kind === "counter" && mode === "rate") return unit ? unit + " per second" : "per second";
    return unit;
  }

  function metricLayout(metric, mode) {
    return baseLayout({
      xaxis: { type: "date" },
      yaxis: { title: { text: plain(yTitle(metric, mode)) }, rangemode: metric.kind === "gauge" ? "normal" : "tozero" },
      showlegend: metric.series.length > 1 || metric.kind === "histogram" || metric.kind === "summary",
    });
  }

  function metricCard(metric) {
    const drawn = metric.series.reduce((sum, s) => sum + s.t.length, 0);
    const kindText = {
      gauge: "gauge", updown: "up-down counter", counter: "counter",
      histogram: "histogram: p50, p90, p99 per export interval", summary: "summary: p50, p90, p99",
    }[metric.kind] || metric.kind;
    const facts = [kindText, metric.unit ? "unit " + metric.unit : "no unit"];
    if (metric.kind !== "gauge") facts.push(metric.temporality);
    facts.push(number(metric.points, 0) + " points");
    if (metric.decimated) facts.push(number(drawn, 0) + " drawn (min-max decimation)");
    if (metric.hiddenSeries) facts.push(number(metric.hiddenSeries, 0) + " more series not drawn");
    const card = el("div", { class: "card", "data-metric": metric.name, "data-kind": metric.kind },
      el("h4", {}, metric.name),
      el("p", { class: "meta" }, facts.join(" \u00b7 ")),
      metric.description ? el("p", { class: "description" }, metric.description) : null);
    const area = el("div", { class: "plot", "data-role": "series" });
    let mode = "rate";
    if (metric.kind === "counter") {
      const rate = el("button", { class: "on", type: "button", "data-mode": "rate" }, "rate per second");
      const total = el("button", { type: "button", "data-mode": "total" }, "cumulative");
      const toggle = el("div", { class: "toggle" }, rate, total);
      for (const button of [rate, total]) {
        button.addEventListener("click", () => {
          mode = button.getAttribute("data-mode");
          rate.classList.toggle("on", mode === "rate");
          total.classList.toggle("on", mode === "total");
          area.setAttribute("data-mode", mode);
          Plotly.react(area, metricTraces(metric, mode), metricLayout(metric, mode), CONFIG);
        });
      }
      card.append(toggle);
      card.append(el("p", { class: "note" },
        "A rate needs two points of a series: its first point shows in the cumulative view only."));
      area.setAttribute("data-mode", mode);
    }
    card.append(area);
    plot(area, metricTraces(metric, mode), metricLayout(metric, mode));
    if (metric.distribution) {
      const dist = el("div", { class: "plot small", "data-role": "distribution" });
      card.append(el("p", { class: "meta" }, "Distribution of everything recorded up to the last export"), dist);
      // Buckets empty in every series at either end are left out: they only crowd the axis.
      const used = metric.distribution.flatMap((series) =>
        series.counts.map((count, i) => (count > 0 ? i : -1)).filter((i) => i >= 0));
      // A loop, not Math.min(...used): spreading thousands of arguments overflows the stack.
      let first = Infinity;
      let last = -1;
      for (const i of used) {
        first = Math.min(first, i);
        last = Math.max(last, i);
      }
      const traces = metric.distribution.map((series) => {
        const shown = series.counts.map((count, i) => [count, i]).filter(([, i]) => i >= first && i <= last);
        return {
          type: "bar",
          x: shown.map(([, i]) => bucketLabel(series.bounds, i)),
          y: shown.map(([count]) => count),
          name: plain(series.label),
        };
      });
      plot(dist, traces, baseLayout({
        height: 240, barmode: "group", showlegend: metric.distribution.length > 1,
        legend: { orientation: "h", y: -0.45, yanchor: "top", font: { size: 11 } },
        xaxis: { type: "category", title: { text: plain(metric.unit || "bucket") } },
        yaxis: { title: { text: "count" } },
      }));
    }
    return card;
  }

  function bucketLabel(bounds, index) {
    if (bounds.length === 0) return "all";
    if (index === 0) return "\u2264 " + number(bounds[0]);
    if (index === bounds.length) return "> " + number(bounds[bounds.length - 1]);
    return "(" + number(bounds[index - 1]) + ", " + number(bounds[index]) + "]";
  }

  function metrics() {
    const section = document.getElementById("metrics");
    if (!data.metrics.length) {
      section.append(el("p", { class: "empty" }, "No metrics in these files."));
      return;
    }
    const groups = new Map();
    for (const metric of data.metrics) {
      const name = group(metric.name);
      if (!groups.has(name)) groups.set(name, []);
      groups.get(name).push(metric);
    }
    for (const [name, members] of groups) {
      const grid = el("div", { class: "grid" });
      for (const metric of members) grid.append(metricCard(metric));
      section.append(el("section", { class: "group", "data-group": name },
        el("h3", {}, name + " (" + members.length + ")"), grid));
    }
    if (data.uncharted.length) {
      section.append(el("p", { class: "note" }, "Not charted (past the chart limit): "
        + data.uncharted.map((u) => u.name + " (" + u.points + " points)").join(", ")));
    }
  }

  // --- spans ------------------------------------------------------------------------------

  function spanTable() {
    const section = document.getElementById("spans");
    if (!data.spanTable.length) {
      section.append(el("p", { class: "empty" }, "No spans in these files."));
      return;
    }
    const head = el("tr", {}, ...["span name", "count", "errors", "total", "mean", "p50", "p99",
      "share of wall time"].map((name) => el("th", {}, name)));
    const body = el("tbody");
    for (const row of data.spanTable) {
      const share = row.share === null ? null : Math.min(row.share, 1);
      body.append(el("tr", { "data-span-name": row.name, "data-count": row.count },
        el("td", { class: "name" }, row.name),
        el("td", { class: "num" }, number(row.count, 0)),
        el("td", { class: row.errors ? "num error" : "num" }, number(row.errors, 0)),
        el("td", { class: "num" }, duration(row.totalMs)),
        el("td", { class: "num" }, duration(row.meanMs)),
        el("td", { class: "num" }, duration(row.p50Ms)),
        el("td", { class: "num" }, duration(row.p99Ms)),
        el("td", { class: "share" },
          el("span", { class: "bar" }),
          el("span", { class: "value" }, row.share === null ? "\u2013" : number(row.share * 100, 1) + " %"))));
      const bar = body.lastChild.querySelector(".bar");
      bar.style.width = share === null ? "0" : (share * 100).toFixed(1) + "%";
    }
    section.append(el("h3", {}, "Where the time goes"),
      el("table", { class: "spans", id: "span-table" }, el("thead", {}, head), body));
  }

  function timelineTraces(trace, highlight) {
    const rows = trace.spans;
    const colours = rows.map((row) =>
      row.error ? "#d62728" : row.spanId === highlight ? "#ff9f1c" : ["#3b6fb6", "#5b8fd6", "#7fb0ea", "#a6ccf5"][row.depth % 4]);
    const hover = rows.map((row) =>
      [
        "<b>" + plain(row.name) + "</b>",
        duration(row.durationMs) + " from +" + duration(row.startMs),
        plain(row.source),
        row.error ? "ERROR " + plain(row.status) : null,
        ...attributeLines(row.attributes),
      ].filter((line) => line !== null).join("<br>"));
    return [{
      type: "bar",
      orientation: "h",
      y: rows.map((_, index) => index),
      x: rows.map((row) => Math.max(row.durationMs, 0)),
      base: rows.map((row) => row.startMs),
      marker: { color: colours, line: { width: rows.map((row) => (row.spanId === highlight ? 2 : 0)), color: "#000" } },
      hovertext: hover,
      hoverinfo: "text",
      customdata: rows.map((row) => row.spanId),
    }];
  }

  function timelineLayout(trace) {
    const rows = trace.spans;
    return baseLayout({
      height: 60 + rows.length * ROW_PX,
      margin: { l: 260, r: 16, t: 8, b: 40 },
      showlegend: false,
      bargap: 0.25,
      xaxis: { title: { text: "milliseconds from the trace's start" }, rangemode: "tozero" },
      yaxis: {
        autorange: "reversed",
        tickmode: "array",
        tickvals: rows.map((_, index) => index),
        ticktext: rows.map((row) => plain("\u00b7 ".repeat(row.depth) + row.name)),
        tickfont: { family: "ui-monospace, SFMono-Regular, Menlo, monospace", size: 11 },
        automargin: true,
      },
    });
  }

  let showTrace = null;

  function timeline() {
    const section = document.getElementById("timeline");
    if (!data.traces.length) {
      if (data.spanTable.length) section.append(el("p", { class: "empty" }, "No trace has its root span in these files."));
      return;
    }
    const select = el("select", { id: "trace-select" });
    data.traces.forEach((trace, index) => {
      select.append(el("option", { value: String(index) },
        duration(trace.durationMs) + " \u2014 " + trace.name + " \u2014 trace " + trace.traceId.slice(0, 12)
          + " (" + trace.spans.length + " spans)"));
    });
    const other = data.otherTraces;
    const summary = el("p", { class: "note", id: "timeline-summary" },
      "The slowest traces by their root span" + (other.notShown
        ? "; the other " + number(other.notShown, 0) + " of " + number(other.traces, 0)
          + " traces: root p50 " + duration(other.p50Ms) + ", p99 " + duration(other.p99Ms) + "."
        : "."));
    const meta = el("p", { class: "meta", id: "timeline-meta" });
    const area = el("div", { class: "plot", id: "timeline-plot" });
    section.append(el("h3", {}, "Timeline"), summary, el("label", {}, "trace ", select), meta, area);
    showTrace = (index, highlight) => {
      const trace = data.traces[index];
      select.value = String(index);
      meta.textContent = "trace " + trace.traceId + " \u00b7 started " + clock(trace.startMs)
        + " \u00b7 " + duration(trace.durationMs)
        + (trace.leftOut ? " \u00b7 " + trace.leftOut + " more spans not drawn" : "");
      area.setAttribute("data-trace", trace.traceId);
      area.setAttribute("data-highlight", highlight || "");
      return Plotly.react(area, timelineTraces(trace, highlight), timelineLayout(trace), CONFIG);
    };
    select.addEventListener("change", () => showTrace(Number(select.value), null));
    queue.push(() => showTrace(0, null).then(() => area.setAttribute("data-drawn", "true")));
  }

  // --- logs -------------------------------------------------------------------------------

  function logs() {
    const section = document.getElementById("logs");
    const c = data.counts;
    if (!data.logs.length) {
      section.append(el("p", { class: "empty" }, "No logs in these files."));
      return;
    }
    const severities = Object.entries(data.logsBySeverity).map(([name, n]) => name + " " + n).join(", ");
    section.append(el("p", { class: "note" }, "Showing the last " + data.logs.length + " of "
      + number(c.logs, 0) + " records (" + severities + ")."));
    const traceIndex = new Map(data.traces.map((trace, index) => [trace.traceId, index]));
    const body = el("tbody");
    for (const row of data.logs) {
      let link = "";
      if (row.traceId && traceIndex.has(row.traceId)) {
        link = el("a", { href: "#timeline", class: "trace-link", "data-trace": row.traceId, "data-span": row.spanId },
          "span " + (row.spanId || row.traceId).slice(0, 8));
        link.addEventListener("click", (event) => {
          event.preventDefault();
          showTrace(traceIndex.get(row.traceId), row.spanId);
          document.getElementById("timeline").scrollIntoView();
        });
      } else if (row.traceId) {
        link = el("span", { class: "muted", title: "this trace is not on the timeline" }, "trace " + row.traceId.slice(0, 8));
      }
      body.append(el("tr", { class: "severity-" + row.severity.toLowerCase() },
        el("td", { class: "time" }, clock(row.timeMs)),
        el("td", { class: "severity" }, row.severity),
        el("td", {}, row.source),
        el("td", { class: "message", title: attributeText(row.attributes).join("\n") }, row.message),
        el("td", {}, link)));
    }
    const head = el("tr", {}, ...["time (UTC)", "severity", "source", "message", "span"].map((name) => el("th", {}, name)));
    section.append(el("table", { class: "logs", id: "log-table" }, el("thead", {}, head), body));
  }

  // --- drawing, one chart at a time ---------------------------------------------------------

  function drain() {
    const next = queue.shift();
    if (!next) {
      document.documentElement.setAttribute("data-ready", "true");
      return;
    }
    Promise.resolve()
      .then(next)
      .catch((error) => {
        window.__lensErrors.push(String(error));
        console.error("lens view: a chart could not be drawn", error);
      })
      .then(() => setTimeout(drain, 0));
  }

  // One section that cannot be drawn must not blank the others.
  for (const section of [header, metrics, spanTable, timeline, logs]) {
    try {
      section();
    } catch (error) {
      window.__lensErrors.push(String(error));
      console.error("lens view: a section could not be drawn", error);
    }
  }
  drain();
})();
