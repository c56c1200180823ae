"""Model lifecycle: Triton versions, live loads and failures; blue-green and canary through Serve (notebook 08)."""
