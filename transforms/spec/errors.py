"""The error types every layer raises, each carrying its exit code; the jobs' wrapper
(pipelines/common.main_wrapper) catches them in one place and prints one line."""

__all__ = ["UsageError", "DataError", "HelpRequested", "first_line", "yaml_problem",
           "load_yaml"]


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


def load_yaml(text):
  """YAML text as plain data (safe: no Python objects), a key given twice in one mapping
  refused: a profile or config that sets a field twice would otherwise keep the last silently.
  yaml.YAMLError as PyYAML raises it (yaml_problem makes it one line)."""
  import yaml

  class UniqueKeys(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    def construct_mapping(self, node, deep=False):
      seen = set()
      for key_node, _ in node.value:
        key = self.construct_object(key_node, deep=deep)
        try:
          again = key in seen
        except TypeError:  # an unhashable key: SafeLoader's own error says so
          break
        if again:
          raise yaml.constructor.ConstructorError(
              "while constructing a mapping", node.start_mark,
              f"found duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
      return super().construct_mapping(node, deep=deep)

  return yaml.load(text, Loader=UniqueKeys)  # noqa: S506 -- a SafeLoader subclass
