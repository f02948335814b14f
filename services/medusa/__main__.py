from medusa.cli import main

main()
