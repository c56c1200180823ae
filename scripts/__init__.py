"""Helper package for the LLM-serving tutorial notebooks.

Notebooks stay thin: they call the functions in these modules and display the results.
Each module is also usable from the command line (see ``pyproject.toml``'s scripts).
"""
