"""Callbacks that let a user's Lightning or Transformers ``Trainer`` report to tuner with
one line: ``callbacks=[TunerCallback()]``. Each validation's metrics become an epoch of
the trial's, with the framework's own checkpoint, whether tuner runs the code as a
training function (``trainable:``) or as a script (``command:``); tuner.integrations.report
decides which. The frameworks are optional extras (``tuner[lightning]``,
``tuner[transformers]``), imported only by their own module:

    from tuner.integrations.lightning import TunerCallback       # lightning.Trainer
    from tuner.integrations.transformers import TunerCallback    # transformers.Trainer
"""
