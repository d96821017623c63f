"""ContentKeys: the record key of each logged record (spec/key.py), the key columns' text or,
for a record without them, the content key -- the hex of its parse fingerprint (of its raw one
when it failed typing) + ':<ordinal>' among exact duplicates, counted in arrival order across
batches and, on resume, across the records already logged. docs/logger.md.
"""
import numpy as np
import pyarrow as pa

from transforms.spec.key import content_keys, hex64, key_batch
from transforms.spec.stages import KEY

__all__ = ["ContentKeys"]


class ContentKeys:
  """The keys of one logger: key_columns ([] = content key). `ordinals`: {content-key hex: next
  ordinal}, the state carried across batches; the hexes the last keys() call counted are kept
  until the next, so a batch that was not written can be uncounted (forget_last)."""

  def __init__(self, key_columns):
    self._key_columns = list(key_columns)
    self.ordinals, self._last = {}, []

  def forget_last(self):
    """Uncounts the ordinals the last keys() call counted (its batch was not written)."""
    for h in self._last:
      if self.ordinals[h] == 1:
        del self.ordinals[h]
      else:
        self.ordinals[h] -= 1
    self._last = []

  def continue_ordinals(self, fp_raw, fp_parse):
    """Counts already-logged records (their fp_raw / fp_parse) into the content-key ordinals,
    as a resumed log does (meaningful without key columns only)."""
    for raw, parse in zip(fp_raw, fp_parse):
      h = f"{raw if parse is None else parse:016x}"
      self.ordinals[h] = self.ordinals.get(h, 0) + 1

  def keys(self, typed, ok, fp_parse, fp_raw):
    """key_batch's keys (large_string); a record without them gets the content key
    (spec/key.py): the hex of its parse fingerprint -- or, when it failed typing, of its raw
    one -- + ':<ordinal>', the ordinal counted in arrival order."""
    n = typed.num_rows
    clear, self._last = [None] * n, []
    if self._key_columns:
      keyed = typed.select(self._key_columns)
      texts = key_batch(keyed, self._key_columns, self._key_columns, 1).column(KEY)
      clear = texts.to_pylist()  # null where a key column is null (Arrow's null propagation)
      content = [i for i, text in enumerate(clear) if text is None]
    else:
      content = range(n)
    if content:
      rows = np.asarray(content, dtype=np.int64)
      hexes = hex64(np.where(ok, fp_parse, fp_raw)[rows])
      ordinals, self._last = [], hexes.to_pylist()
      for h in self._last:
        ordinals.append(self.ordinals.get(h, 0))
        self.ordinals[h] = ordinals[-1] + 1
      keyed = content_keys(hexes, ordinals)
      if not self._key_columns:
        return keyed
      for i, key in zip(content, keyed.to_pylist()):
        clear[i] = key
    return pa.array(clear, pa.large_string())
