"""The report: its model and its renderers.

  report_model  the report model: frozen dataclasses with to_dict(), report.json's shape
  render        the text and HTML renderers of a report (its dict form)
  charts        the HTML report's SVG charts and number formatters
  decisions_view  what the model decides: the summary's lines and the page's first section

Imports neither Beam nor TensorFlow, and nothing of replay's but its own modules: the diff
fills the model (replay/diff/summary.py), the nightly check and the API render its dict.
Importing this package imports none of them.
"""
__all__ = ["charts", "decisions_view", "render", "report_model"]
