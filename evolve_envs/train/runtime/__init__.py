"""What a run needs from Ray besides its workers: placement on the cluster, the weight registry,
the pause of the synchronous barrier, the head's watch, remote errors in one line.

>>> from evolve_envs.train.runtime.remote_errors import remote_error
>>> remote_error(ValueError("bad action"))
'ValueError: bad action'
"""
