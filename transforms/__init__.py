"""skewtrace building blocks, one sub-package per role; imports flow from the first to the last:

  codec     compiled kernels, no Beam: CRC32C, word helpers, tf.Example encoder and decoder,
            TFRecord framing, XXH64, CSV splitting, Arrow buffer access
  spec      Beam-free contracts: the stages and each stage's rule, the fingerprint, the record
            key, the feature-log and run-metadata formats, profile, schema, the error types
  graph     TF Transform graphs outside Beam: the TFT feed, analyzer fingerprints
  model     the model the predict stage calls: a SavedModel signature or a module hook
  beam      Beam plumbing: the Arrow coders, the ahead DoFn, progress counters
  stages    one composite PTransform per module, each reading its rule from spec
  features  TF Transform feature modules (taxi, ...): what a user writes against

transforms.taxi is transforms.features.taxi under the name run metadata record. Importing this
package imports none of them (no side effects).
"""
__all__ = ["codec", "spec", "graph", "model", "beam", "stages", "features", "taxi"]
