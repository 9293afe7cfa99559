"""The jobs the commands run: ``convert`` (one streaming pass), ``shard`` and ``bucket`` (plans of
units on the job engine), with their options (:mod:`.options`)."""
