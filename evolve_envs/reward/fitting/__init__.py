"""Fitting a progress model from recorded episodes: the episodes, their labels and the frame
store they stream through (`data`), the network and its weights (`model`), the objective
(`loss`), the loop with its checkpoints and the done threshold (`trainer`), the report and model
card (`report`). ``evolve-envs fit-reward`` runs it; the model it writes is served by the
``fitted`` backend. It sits above :mod:`evolve_envs.recording`, which it reads."""
