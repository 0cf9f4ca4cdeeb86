from drillbit.cli import main

main()
