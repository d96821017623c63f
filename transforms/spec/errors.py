"""The error types every layer raises, each carrying its exit code; the jobs' wrapper
(pipelines/common.main_wrapper) catches them in one place and prints one line."""

__all__ = ["UsageError", "DataError", "HelpRequested", "first_line", "yaml_problem"]


class UsageError(Exception):
  """Bad flags or input: a clear message and exit code 2."""
  exit_code = 2


class HelpRequested(Exception):
  """--help was asked for: the text is printed on stdout and the job exits 0."""
  exit_code = 0


class DataError(UsageError):
  """Input data that cannot be accepted (e.g. too many rejected rows): exit code 2."""


def first_line(error):
  """The first line of an exception's message (its type's name when it has none): what a
  one-line error quotes of a library's multi-line one."""
  return (str(error).strip().splitlines() or [type(error).__name__])[0]


def yaml_problem(error):
  """One line for a YAML parse error: where (line, column, 1-based) and what, from the marks
  PyYAML gives (its own message spans several lines, with the text quoted)."""
  if isinstance(error, RecursionError):  # Python's recursion limit bounds the nesting
    return "nested too deeply to read"
  mark, problem = getattr(error, "problem_mark", None), getattr(error, "problem", None)
  if mark is None or not problem:
    return first_line(error)
  context = getattr(error, "context", None)
  return (f"line {mark.line + 1}, column {mark.column + 1}: "
          + (f"{context}: " if context else "") + problem)
