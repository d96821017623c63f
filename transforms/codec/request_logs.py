"""Where serving systems' request logs keep the requests: the payload texts of the JSON lines of
a SageMaker Data Capture file or a Vertex AI request-response export, decoded.

  sagemaker  SageMaker Model Monitor Data Capture, one line per invocation (SageMaker Developer
             Guide, "Data capture" > "Capture data from real-time endpoint", its sample of a
             captured file; docs.aws.amazon.com/sagemaker/latest/dg/
             model-monitor-data-capture.html):
             {"captureData": {"endpointInput": {"observedContentType", "mode", "data",
             "encoding"}, "endpointOutput": {...}}, "eventMetadata": {"eventId",
             "inferenceId"?, "inferenceTime"}, "eventVersion"}. The payload is
             endpointInput.data, encoded "JSON", "CSV" or "BASE64" (of JSON or CSV, as
             observedContentType says; DataCaptureConfig: with no content types configured
             SageMaker writes BASE64). A JSON payload is an object, a list of objects,
             {"instances": [...]} or, for application/jsonlines, one object per line; a CSV
             payload is header-less CSV lines.
  vertex     Vertex AI online prediction request-response logging, its BigQuery table
             (endpoint, deployed_model_id, logging_time, request_id, request_payload,
             response_payload; cloud.google.com/vertex-ai/docs/predictions/
             online-prediction-logging) exported as JSON Lines: request_payload is a repeated
             STRING, so a list of JSON texts, each an instance (or a request body).
"""
import base64
import binascii
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.codec import csv_records
from transforms.codec.json_values import dig, joined, loads

__all__ = ["JSON", "JSONLINES", "CSV", "payload_kind", "first_payload", "payloads",
           "one_line", "csv_payloads", "responses", "split_responses"]

JSON, JSONLINES, CSV = "json", "jsonlines", "csv"


def payload_kind(encoding, content_type):
  """How a SageMaker capture holds its payload: (JSON | JSONLINES | CSV, is base64), or
  (reason, None) when it is none of those."""
  enc, ct = (encoding or "").upper(), (content_type or "").lower()
  if enc == "BASE64":
    if "csv" in ct:
      return CSV, True
    if "json" in ct:
      return (JSONLINES if "jsonlines" in ct else JSON), True
    return f"BASE64 payload of content type {content_type!r} (neither JSON nor CSV)", None
  if enc in ("JSON", "CSV"):
    return (CSV if enc == "CSV" else JSONLINES if "jsonlines" in ct else JSON), False
  return f"payload encoding {encoding!r} (not JSON, CSV or BASE64)", None


def first_payload(obj, preset):
  """(kind, value): the first payload of parsed line `obj` (a dict) as a Python value, or
  (CSV, None). Plan time only; ValueError says why there is none."""
  if preset == "sagemaker":
    inp = (obj.get("captureData") or {}).get("endpointInput") or {}
    kind, b64 = payload_kind(inp.get("encoding"), inp.get("observedContentType"))
    if b64 is None:
      raise ValueError(kind)
    text = inp.get("data")
    if not isinstance(text, str):
      raise ValueError("no captureData.endpointInput.data")
    text = base64.b64decode(text, validate=True) if b64 else text.encode("utf-8")
    if kind == CSV:
      return CSV, None
    lines = [t for t in text.splitlines() if t.strip()] if kind == JSONLINES else [text]
    return JSON, loads(lines[0] if lines else b"")
  texts = obj.get("request_payload")
  texts = [texts] if isinstance(texts, str) else texts or []
  if not texts or not isinstance(texts[0], str):
    raise ValueError("no request_payload")
  return JSON, loads(texts[0])


def payloads(objs, preset):
  """(texts, line, kinds, rejected) of the line objects `objs` (a StructArray): texts
  (large_binary) holds the payloads, line[i] the line of payload i and kinds[i] its kind;
  rejected lists (line, reason) of the lines whose payload cannot be taken out."""
  if preset == "vertex":
    texts = dig(objs, ("request_payload",))
    line = np.arange(len(objs))
    if pa.types.is_list(texts.type) or pa.types.is_large_list(texts.type):
      line = pc.list_parent_indices(texts).to_numpy()
      texts = pc.list_flatten(texts)
    if not pa.types.is_string(texts.type):  # no line holds one: each is rejected as empty
      return pa.array([], pa.large_binary()), np.zeros(0, np.int64), np.zeros(0, object), []
    keep = texts.is_valid().to_numpy(zero_copy_only=False)
    return (texts.filter(pa.array(keep)).cast(pa.large_binary()), line[keep],
            np.full(int(keep.sum()), JSON, dtype=object), [])
  return _captures(objs)


def _captures(objs):
  n = len(objs)
  inp = dig(objs, ("captureData", "endpointInput"))
  data, enc, ctype = [dig(inp, (key,)) for key in ("data", "encoding", "observedContentType")]
  # The kind of each line, from its few distinct (encoding, content type) pairs.
  text = [a if pa.types.is_string(a.type) else pa.nulls(n, pa.string()) for a in (enc, ctype)]
  codes = pc.dictionary_encode(pc.binary_join_element_wise(
      *[pc.fill_null(a, "") for a in text], "\n"))
  found = [payload_kind(*pair.split("\n")) for pair in codes.dictionary.to_pylist()]
  which = codes.indices.to_numpy()
  kind = np.array([k for k, _ in found], dtype=object)[which]
  b64 = np.array([b is True for _, b in found], dtype=bool)[which]
  readable = np.array([b is not None for _, b in found], dtype=bool)[which]
  has = data.is_valid().to_numpy(zero_copy_only=False) if pa.types.is_string(data.type) \
      else np.zeros(n, dtype=bool)
  rejected = [(int(i), "no captureData.endpointInput.data") for i in np.flatnonzero(~has)]
  rejected += [(int(i), kind[i]) for i in np.flatnonzero(has & ~readable)]
  line = np.flatnonzero(has & readable)
  texts = data.take(pa.array(line)).cast(pa.large_binary())
  coded = b64[line]
  if coded.any():
    # binascii per payload: about 0.5 us for a 300-byte payload, a small part of reading its
    # line (pyarrow has no base64 kernel).
    decoded, ok = [], np.ones(len(line), dtype=bool)
    for j in np.flatnonzero(coded):
      try:
        decoded.append(base64.b64decode(texts[int(j)].as_py(), validate=True))
      except (binascii.Error, ValueError) as e:
        decoded.append(b"")
        ok[j] = False
        rejected.append((int(line[j]), f"BASE64 payload that is not base64 ({e})"))
    texts = pc.replace_with_mask(texts, pa.array(coded), pa.array(decoded, pa.large_binary()))
    line, texts = line[ok], texts.filter(pa.array(ok))
  return texts, line, kind[line], sorted(rejected)


def one_line(texts, kinds):
  """(texts, bad): JSON payloads as one-line JSON texts (a JSON Lines payload becomes a JSON
  list of its lines); bad lists (index, reason) of those that are not JSON."""
  broken = (kinds == JSONLINES) | pc.fill_null(pc.match_substring_regex(texts, "[\r\n]"),
                                               False).to_numpy(zero_copy_only=False)
  if not broken.any():
    return texts, []
  # Per payload, only for JSON Lines payloads and payloads holding line breaks (valid JSON has
  # them only between tokens, where a space does as well).
  fixed, bad = [], []
  for j in np.flatnonzero(broken):
    text = texts[int(j)].as_py()
    if kinds[j] == JSONLINES:
      text = b"[" + b",".join(t for t in text.splitlines() if t.strip()) + b"]"
    try:
      loads(text)
      fixed.append(text.replace(b"\r", b" ").replace(b"\n", b" "))
    except ValueError as e:
      fixed.append(text)
      bad.append((int(j), str(e)))
  texts = pc.replace_with_mask(texts, pa.array(broken), pa.array(fixed, pa.large_binary()))
  return texts, bad


def csv_payloads(texts, names, file_index):
  """(parts, rejected) of header-less CSV payloads: parts are (fields, payload index, raw) of
  the records (csv_records: binary cells), rejected (payload index, raw, reason)."""
  odd = pc.bit_wise_and(pc.count_substring(texts, '"'), 1).to_numpy(zero_copy_only=False) == 1
  rejected = [(int(j), texts[int(j)].as_py(), "CSV payload: unterminated quoted field")
              for j in np.flatnonzero(odd)]
  index = np.flatnonzero(~odd)
  # One buffer, each payload after a line break (a leading one too, so that a BOM is data),
  # and one after the last: every record is terminated, so the one block read holds them all
  # at their offsets in the buffer (an unterminated last record would come in a block of its
  # own, its offsets counted from 0, and be taken for the first payload's).
  data, offsets = joined(texts.filter(pa.array(~odd)), b"\n", b"")
  data += b"\n"
  starts = offsets[:-1]
  parts = []
  for block in csv_records.iter_blocks(io.BytesIO(data), len(data) + 1):
    batch, bad = csv_records.parse_block(block, names, file_index)
    owner = index[np.searchsorted(starts, block.starts, side="right") - 1]
    by_line = dict(zip(block.lines.tolist(), owner.tolist()))
    rejected += [(by_line[number], raw, f"CSV payload: {why}") for number, raw, why in bad]
    good = owner[~np.isin(block.lines, [number for number, _, _ in bad])]
    parts.append(([(name, batch.column(name)) for name in names], good,
                  batch.column(csv_records.RAW_COLUMN)))
  return parts, rejected


# --------------------------------------------------------------------------- responses
# What the model answered, beside each request (ingest --served_prediction with a preset):
#   vertex     response_payload, a repeated STRING like request_payload: the i-th text answers
#              the i-th request text (a line whose two lists differ in length answers none);
#   sagemaker  captureData.endpointOutput: {observedContentType, mode, data, encoding}, the
#              same encodings as endpointInput (JSON, CSV, BASE64 of either).
# split_responses then gives each record of a payload its own answer.


def responses(objs, preset, owner, request_index=None):
  """(texts, reasons) per payload of payloads(objs, preset): the response text answering it
  (large_binary; null where the line holds none) and, per payload index, why it has no usable
  one ({payload: reason}). owner: each payload's line; request_index (vertex): each payload's
  position in its line's request_payload list."""
  n = len(owner)
  if preset == "vertex":
    req, resp = dig(objs, ("request_payload",)), dig(objs, ("response_payload",))
    if not (pa.types.is_list(resp.type) or pa.types.is_large_list(resp.type)):
      return pa.nulls(n, pa.large_binary()), {}
    lengths = pc.list_value_length(resp).fill_null(0).to_numpy(zero_copy_only=False)
    asked = (pc.list_value_length(req).fill_null(0).to_numpy(zero_copy_only=False)
             if pa.types.is_list(req.type) or pa.types.is_large_list(req.type)
             else np.ones(len(objs), np.int64))
    starts = np.concatenate(([0], np.cumsum(lengths)))[:-1]
    flat = pc.list_flatten(resp)
    if not pa.types.is_string(flat.type):
      return pa.nulls(n, pa.large_binary()), {}
    ok = (lengths[owner] == asked[owner]) & (lengths[owner] > 0)
    at = np.where(ok, starts[owner] + request_index, 0)
    texts = flat.cast(pa.large_binary()).take(pa.array(at, mask=~ok)) if n else \
        pa.array([], pa.large_binary())
    bad = {int(p): f"response_payload holds {int(lengths[owner[p]])} predictions for "
                   f"{int(asked[owner[p]])} request texts"
           for p in np.flatnonzero(~ok & (lengths[owner] > 0))}
    return texts, bad
  out = dig(objs, ("captureData", "endpointOutput"))
  data, enc, ctype = [dig(out, (key,)) for key in ("data", "encoding", "observedContentType")]
  if not pa.types.is_string(data.type):
    return pa.nulls(n, pa.large_binary()), {}
  texts, bad = [], {}
  encs = enc.to_pylist() if pa.types.is_string(enc.type) else [None] * len(objs)
  types = ctype.to_pylist() if pa.types.is_string(ctype.type) else [None] * len(objs)
  values = data.to_pylist()
  for p, line in enumerate(owner):  # per capture: its encoding, like the request's
    text, kind = values[line], payload_kind(encs[line], types[line])
    if text is None or kind[1] is None:
      texts.append(None)
      if text is not None:
        bad[p] = f"endpointOutput: {kind[0]}"
      continue
    try:
      raw = base64.b64decode(text, validate=True) if kind[1] else text.encode("utf-8")
    except (binascii.Error, ValueError) as e:
      texts.append(None)
      bad[p] = f"endpointOutput: BASE64 data that is not base64 ({e})"
      continue
    texts.append((b"csv:" if kind[0] == CSV else b"json:") + raw)
  return pa.array(texts, pa.large_binary()), bad


def split_responses(texts, counts):
  """(per-record answer texts, reasons): for each payload p, its response split into counts[p]
  answers -- a JSON {"predictions": [...]} body or a JSON list into its elements when the
  payload holds several records, else the whole text; a CSV response (sagemaker) into its
  non-empty lines; JSON Lines into its lines -- as a list of JSON texts per payload (None where
  there is no response), and {payload: reason} where the count differs from counts[p].

  Per payload in Python (json): responses are small and one per capture; a vectorised split
  like the requests' is the next step when a benchmark shows it matters."""
  import json
  out, bad = [], {}
  for p, raw in enumerate(texts.to_pylist()):
    want = int(counts[p])
    if raw is None or want == 0:
      out.append(None)
      continue
    is_csv = raw.startswith(b"csv:")
    body = raw[4:] if is_csv else raw[5:] if raw.startswith(b"json:") else raw
    if is_csv:
      parts = [line.strip().decode("utf-8", "replace") for line in body.splitlines()
               if line.strip()]
      if want == 1 and len(parts) > 1:
        parts = [",".join(parts)]
    else:
      try:
        value = json.loads(body)
      except ValueError:
        try:  # JSON Lines: one answer per line
          value = {"predictions": [json.loads(t) for t in body.splitlines() if t.strip()]}
        except ValueError as e:
          out.append(None)
          bad[p] = f"response that is not JSON ({e})"
          continue
      if isinstance(value, dict) and "predictions" in value:
        value = value["predictions"]
        parts = [json.dumps(v) for v in value] if isinstance(value, list) else [json.dumps(value)]
        if want == 1 and len(parts) > 1 and not isinstance(value[0], (list, dict)):
          parts = [json.dumps(value)]  # one record's scores
      elif isinstance(value, list) and want > 1:
        parts = [json.dumps(v) for v in value]
      else:
        parts = [json.dumps(value)]
    if len(parts) != want:
      out.append(None)
      bad[p] = f"the response holds {len(parts)} predictions for {want} instances"
      continue
    out.append(parts)
  return out, bad
