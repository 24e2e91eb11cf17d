"""Integrations with other libraries: ``tapegrad.integrations.dask`` maps
traced gradients over Dask arrays and warms Dask workers."""
