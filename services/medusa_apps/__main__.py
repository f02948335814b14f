from medusa_apps.cli import main

main()
