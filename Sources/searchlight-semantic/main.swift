print("searchlight-semantic")
