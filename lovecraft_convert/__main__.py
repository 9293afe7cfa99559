from lovecraft_convert.cli import main

if __name__ == "__main__":
    main()
