from drillbit.entry.cli import main

main()
