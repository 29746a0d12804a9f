"""Integrations with the runtimes and libraries training frameworks use beside lens.

One submodule per integration: `ray` (trace context across Ray remote calls), `nccl`
(trace context as bytes for a collective or any other byte channel), `aiohttp` and
`fastapi`. This package imports none of them, and each submodule imports its third-party
package inside its functions, never at import, so importing a submodule works without
that package installed; a function that needs a missing package raises `ImportError`
naming what to pip install. `ray` and `nccl` need no third-party package at all.
"""
