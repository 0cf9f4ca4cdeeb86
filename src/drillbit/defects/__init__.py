"""Jobs that reproduce published recovery-path defects, for ``drills/known-defects/``.

Each module is a small training job as a team would write it, doing what the affected code
did (at the stack's affected version where it can be installed here, else by the same
mechanism: its docstring says which), with a switch for the fix or workaround. drillbit
knows them only through their built-in job profiles (``drillbit.spec.config``)."""
