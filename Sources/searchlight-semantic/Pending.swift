func staticSpeed(_ options: ToolOptions) throws { fail("pending") }
func indexSpeed(_ options: ToolOptions) throws { fail("pending") }
func evaluate(_ options: ToolOptions) throws { fail("pending") }
