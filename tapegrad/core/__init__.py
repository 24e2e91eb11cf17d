"""The core layer: the tape (flat record arrays, liveness, in-place writes),
``Tensor``, grad mode, index maps and the op registry.  It uses only
``kernels``; the layers above reach it, never the other way round (the few
calls ``Tensor`` makes upwards go through functions they bind into
``tensor.bound``)."""
