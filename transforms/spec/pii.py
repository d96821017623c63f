"""PII in feature logs: the rule the job and the production logger share, so hashed logs join.

A PII log column (the key, a transformed feature's value and served value, a logged input) is
written as pii_hash(value, secret): HMAC-SHA256 hex over the value's canonical encoding,
fingerprint.encode_record({"value": value}) (docs/fingerprint.md). The secret is read from an
environment variable the user names, on the process that hashes; it is never written, and it
never travels in a pipeline's options or graph (a Pii carries the variable's name only).
Fingerprints are computed over the clear values, so hashed logs still compare stage by stage;
with the key hashed, log buckets are computed from the hashed key, on both sides alike.
"""
import dataclasses
import hashlib
import hmac
import os

import pyarrow as pa

from transforms.spec import fingerprint
from transforms.spec.errors import UsageError

__all__ = ["KEY", "HASH", "Pii", "pii_hash", "secret_from_env", "with_key"]

KEY = "key"  # the name that makes the record key a PII column
HASH = "hmac-sha256"  # run metadata pii.hash


def pii_hash(value, secret):
  """HMAC-SHA256 hex of a value's canonical encoding (docs/fingerprint.md), keyed by secret."""
  return hmac.new(secret, fingerprint.encode_record({"value": value}), hashlib.sha256).hexdigest()


def with_key(columns, key_columns):
  """The PII columns with the key and its columns as one: the record key is the text of its
  key columns (spec/key.py), so hashing one and not the other would leave it in clear. Sorted."""
  columns = set(columns)
  if KEY in columns or columns & set(key_columns):
    columns |= {KEY} | set(key_columns)
  return sorted(columns)


def secret_from_env(env_name):
  """The HMAC key (bytes) from the environment variable `env_name`; UsageError when unset."""
  if not env_name or not os.environ.get(env_name):
    raise UsageError(f"PII columns need an HMAC key: environment variable {env_name!r} is not "
                     "set")
  return os.environ[env_name].encode("utf-8")


@dataclasses.dataclass(frozen=True)
class Pii:
  """The PII columns of a job (sorted names: KEY and/or transformed features) and the name of
  the environment variable holding the HMAC key. Picklable; holds no secret."""
  columns: tuple = ()
  key_env: str = ""

  def __post_init__(self):
    object.__setattr__(self, "columns", tuple(sorted(set(self.columns))))

  @classmethod
  def parse(cls, text, key_env, key_columns=()):
    """From a comma-separated column list, as a flag gives it (with_key: the key and its
    columns as one)."""
    columns = [c.strip() for c in (text or "").split(",") if c.strip()]
    return cls(tuple(with_key(columns, key_columns)), key_env or "")

  def check_columns(self, features, flag="pii_columns"):
    """UsageError naming the PII columns that are neither KEY nor among `features` (nothing of
    them would be hashed)."""
    unknown = [c for c in self.columns if c != KEY and c not in features]
    if unknown:
      raise UsageError(f"{flag} {', '.join(unknown)}: not a log column (the key or a "
                       f"transformed feature: {', '.join(sorted(features))})")

  @property
  def key(self):
    """Whether the record key is hashed."""
    return KEY in self.columns

  def features(self, names):
    """The PII features among transformed feature `names`."""
    return [n for n in names if n in self.columns]

  def hashed(self, arr):
    """pa.string: each value of Arrow array `arr` as pii_hash (nulls stay null). One HMAC per
    value in Python: PII columns are few, and HMAC-SHA256 has no vectorised Arrow kernel.
    Runs where the log is written (a Beam worker): without the key there, the error says so."""
    try:
      secret = secret_from_env(self.key_env)
    except UsageError as e:
      raise UsageError(f"{e} in this worker's environment: on Dataflow or Flink every SDK "
                       "worker needs it (docs/features.md, PII)") from None
    values = arr.to_pylist()
    return pa.array([None if v is None else pii_hash(v, secret) for v in values], pa.string())

  def metadata(self):
    """The run metadata's pii section (None without PII columns)."""
    return {"columns": list(self.columns), "hash": HASH} if self.columns else None
