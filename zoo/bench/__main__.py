from zoo.bench.suite import main

main()
