"""Sieve: detect and filter knowledge poisoning in retrieval-augmented generation.

Importing Sieve changes no environment variable. Sieve's own programs (the ``sieve`` command, the
service, the dashboard) set their process settings with
:func:`sieve.runtime.configure_process_environment`; the model loaders never touch the network.
"""

__version__ = "0.1.0"
