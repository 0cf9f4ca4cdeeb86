"""Small real training jobs on the recovery stacks teams deploy (torchft, NVIDIA's
Resiliency Extension, DLRover), each written the way its stack's documentation says.

They are test fixtures: the built-in job profiles ``torchft*``, ``nvrx*`` and ``dlrover*``
launch them, and the stack presets read the stack's own lines.
No fault, probe or checker knows them; everything about them is in their profiles.
"""
