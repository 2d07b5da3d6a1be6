"""Fitting a progress model from recorded episodes: the data and labels (`data`), the loop
(`fit`), the report and model card (`report`). ``evolve-envs fit-reward`` runs it; the model
it writes is served by the ``fitted`` backend."""
