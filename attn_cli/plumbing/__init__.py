"""Stage 1, the process: errors and their kinds, config presets, devices, atomic files, text input, interrupts."""
