"""The model the `predict` stage calls (docs/features.md, "The model and the predict stage"): a
TensorFlow SavedModel signature (a TFX Trainer export or a Keras model exported for serving) or
a module hook's predict(features) for other frameworks, loaded and checked against the
transformed features before any record is read (model/load.py), and the stage's columns over a
table of model inputs (model/predict.py); the model flags every job that takes one shares
(model/flags.py).

It may import codec and spec, never Beam; TensorFlow only inside the functions that load or
call a SavedModel (through graph/quiet.py), so a diff or logger without a model pays nothing.
"""
__all__ = ["flags", "load", "predict"]
