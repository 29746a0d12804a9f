"""`lens view`: one self-contained HTML report of OTLP/JSON-lines files.

Reading (`_otlp_json`), the three signals' summaries (`_metric_charts`, `_span_tables`,
`_log_table`), the two passes over the files (`_report`) and the page (`_page`, the only
module that imports the charting library, Plotly) are each one module. Nothing here is
imported by `import nemo.lens`; the `lens view` command imports it when it runs.
"""
