"""What the check scripts in python/tests share. Each runs as a script
(python_test.go starts it under the launcher) and imports this module
from its own directory, after gorun."""
import numpy as np

import gorun


def usable(c, expect, what):
    """c (the gorun module, for the job's communicator, or a Group) still
    reduces: an allreduce of rank + 1 over its ranks. what names the
    moment in the failure."""
    ok = np.array([c.rank() + 1], dtype=np.int64)
    c.allreduce_(ok)
    n = c.size()
    expect(ok[0] == n * (n + 1) // 2, "%s: %s" % (what, ok))


def spent(c, expect, what):
    """c no longer works: its barrier raises GorunError (a refusal, an
    abort or a free ended it). what is the failure if it still works."""
    try:
        c.barrier()
    except gorun.GorunError:
        return
    expect(False, what)
