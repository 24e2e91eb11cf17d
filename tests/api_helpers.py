"""Values shared by the public-API tests."""

import numpy as np

SEED = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])
